"""The ``nvml`` GPU source: the real NVIDIA bindings (``nvidia-ml-py``, module ``pynvml``).

``nvmlInit`` once; static facts (index, UUID, name, PCI bus id, driver version, MIG instances)
read once and cached; each collection reads every dcgm-exporter default field NVML can give
(table in ``nvml_reads``) in one worker thread; XID events come from ``nvml_xid`` in a thread of
their own.  Where ``nvmlGpmQueryDeviceSupport`` says yes (Hopper and newer, not vGPU), the same
worker thread also reads DCGM's profiling fields (``DCGM_FI_PROF_*``) per GPU and per MIG
instance through GPM (``nvml_gpm``: one sample per device per collection, rates over the interval
between two collections).  Failures are facts, not crashes:

- a field NVML does not support on a GPU (``NotSupported``, ``NoPermission``) is skipped and
  counted once, then never asked again; a symbol the driver lacks (``FunctionNotFound``) falls back
  to an older symbol where one exists, else the field is skipped and counted once;
- a GPU whose calls say ``GpuIsLost`` / ``Unknown``, or whose memory read fails, is ``lost`` with
  empty fields (counted ``gpu_lost`` each collection) while the others keep reporting; it is
  reported again when it answers;
- GPM unsupported on a GPU (or a driver without GPM) is logged once and counted once
  (``not_supported`` / ``function_not_found``); so is each GPM metric a device does not support;
  a failing GPM sample or metrics call is counted ``nvml_error`` (logged once) and re-primed;
- ``DriverNotLoaded`` / ``Uninitialized`` aborts the collection (``SourceError("driver_not_loaded")``)
  and NVML is re-initialised on a later collection, backing off 1 s doubling to 60 s.

Health is not judged here (``exporter.health`` does that from ``lost``, ``xid_events`` and fields).
This is the only module that imports ``pynvml``, lazily, so importing it needs no NVIDIA library.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from exporter.sample import FleetSample, GpuSample, MigInstance
from exporter.sources.base import SourceError, SourceUnavailable
from exporter.sources.nvml_gpm import GpmStream, GpmUnsupported, device_supported
from exporter.sources.nvml_reads import GPU_READS, MEMORY, MIG_READS, XID_FIELD, Read
from exporter.sources.nvml_xid import XidWatcher

log = logging.getLogger(__name__)

LIBRARY_MISSING = (
    "NVML library libnvidia-ml.so.1 not found: is this a GPU node with the NVIDIA driver, "
    "and is the container run with the NVIDIA runtime?"
)

# Bounded values of FleetSample.errors keys (-> queuepilot_exporter_source_errors_total{kind}).
ERROR_KINDS: tuple[str, ...] = (
    "not_supported",  # a field NVML does not support on that GPU (counted once per GPU and field)
    "no_permission",  # a field NVML refuses to this process (counted once per GPU and field)
    "function_not_found",  # the driver lacks the symbol and there is no fallback (counted once)
    "nvml_error",  # any other NVML error on a non-core field (counted each time)
    "gpu_lost",  # a GPU stopped answering (counted each collection while lost)
    "xid_registration",  # XID event registration refused (counted each attempt)
    "xid_wait",  # the XID event wait failed (counted each time)
)
# SourceError kind raised by collect() while the driver is gone (re-init pending).
DRIVER_NOT_LOADED = "driver_not_loaded"

REINIT_BACKOFF = (1.0, 60.0)


@dataclass(slots=True)
class _Mig:
    handle: Any
    gpu_instance_id: int
    profile: str
    uuid: str
    gpm: GpmStream | None = None


@dataclass(slots=True)
class _Gpu:
    """Cached static facts of one GPU; ``known`` is False until they could be read."""

    index: int
    handle: Any = None
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    migs: tuple[_Mig, ...] = ()
    known: bool = False
    lost: bool = False
    gpm: GpmStream | None = None


class _Lost(Exception):
    """This GPU stopped answering."""


class _DriverGone(Exception):
    """NVML as a whole stopped answering (driver unloaded, library uninitialised)."""


def mig_profile(mig_device_name: str) -> str:
    """``"NVIDIA A100-SXM4-40GB MIG 1g.5gb"`` -> ``"1g.5gb"`` (NVML names MIG devices this way)."""
    _, sep, profile = mig_device_name.rpartition(" MIG ")
    return profile.strip() if sep else ""


class NvmlSource:
    """A ``GpuSource`` over NVML. ``clock`` stamps XID events; ``xid_wait_ms`` bounds one event wait."""

    name = "nvml"
    ERROR_KINDS = ERROR_KINDS

    def __init__(
        self,
        hostname: str,
        *,
        xid_wait_ms: int = 1000,
        clock: Callable[[], float] = time.time,
        xid_backoff: tuple[float, float] = (1.0, 30.0),
        gpm: bool = True,
    ) -> None:
        self.hostname = hostname
        self.gpm = gpm
        self.xid_wait_ms = int(xid_wait_ms)
        self._clock = clock
        self._xid_backoff = xid_backoff
        self._nv: Any = None
        self._lock = threading.Lock()  # one blocking operation at a time (start / collect / close)
        self._inits = 0  # successful nvmlInit calls not yet shut down
        self._gpus: list[_Gpu] = []
        self.driver_version = ""
        self._xid: XidWatcher | None = None
        self._last_xid: dict[str, int] = {}
        self._need_init = False
        self._next_init_at = 0.0
        self._init_backoff = REINIT_BACKOFF[0]
        self._skip: set[tuple[str, str]] = set()  # (device uuid, read name): not supported / no permission
        self._alt: dict[str, int] = {}  # read name -> alternative in use after FunctionNotFound
        self._gone: set[str] = set()  # reads whose every symbol is missing from this driver
        self._logged: set[tuple[str, ...]] = set()
        self._closed = False
        self._pending_errors: Counter[str] = Counter()  # met outside a collection (start), counted at the next
        self._counted: set[tuple[str, ...]] = set()  # once-counted facts (GPM unsupported per device...)

    # --- GpuSource -----------------------------------------------------------------------------------
    async def start(self) -> None:
        await asyncio.to_thread(self._start_blocking)

    async def collect(self, now: float) -> FleetSample:
        t0 = time.perf_counter()
        gpus, errors = await asyncio.to_thread(self._collect_blocking, now)
        return FleetSample(
            taken_at=now,
            hostname=self.hostname,
            gpus=tuple(gpus),
            source=self.name,
            errors=MappingProxyType(dict(errors)),
            collect_seconds=time.perf_counter() - t0,
        )

    async def close(self) -> None:
        await asyncio.to_thread(self._close_blocking)

    # --- start / close -------------------------------------------------------------------------------
    def _start_blocking(self) -> None:
        try:
            import pynvml
        except ImportError as e:  # pragma: no cover - a dependency of the package
            raise SourceUnavailable(
                f"nvidia-ml-py is not installed ({e}); pip install nvidia-ml-py"
            ) from None
        nv = self._nv = pynvml
        with self._lock:
            try:
                nv.nvmlInit()
            except nv.NVMLError_LibraryNotFound:
                raise SourceUnavailable(LIBRARY_MISSING) from None
            except nv.NVMLError_FunctionNotFound:
                raise SourceUnavailable(
                    "libnvidia-ml.so.1 has no nvmlInitWithFlags: the NVIDIA driver is too old or the library is not NVML"
                ) from None
            except (nv.NVMLError_DriverNotLoaded, nv.NVMLError_Uninitialized) as e:
                log.warning("NVML: %s at start; will re-initialise on a later collection", e)
                self._need_init = True
                return
            except nv.NVMLError as e:
                raise SourceUnavailable(f"NVML could not initialise: {e}") from None
            self._inits += 1
            try:
                self._enumerate()
            except _DriverGone as e:
                log.warning("NVML: %s while enumerating GPUs; will re-initialise later", e)
                self._need_init = True
                return
            self._start_xid()
            log.info(
                "NVML %s: %d GPU(s): %s",
                self.driver_version,
                len(self._gpus),
                ", ".join(f"{g.index}={g.name} {g.uuid}" for g in self._gpus),
            )

    def _close_blocking(self) -> None:
        with self._lock:
            self._closed = True
            if not self._stop_xid():
                log.warning("NVML XID thread did not stop in time; not shutting NVML down under it")
                return
            self._shutdown()

    def _start_xid(self) -> None:
        self._xid = XidWatcher(
            self._nv,
            lambda: [(g.uuid, g.handle) for g in self._gpus if g.known],
            wait_ms=self.xid_wait_ms,
            clock=self._clock,
            backoff=self._xid_backoff,
        )
        self._xid.seed_last(self._last_xid)
        self._xid.start(first_attempt_timeout=max(2.0, 2 * self.xid_wait_ms / 1000.0))

    def _stop_xid(self) -> bool:
        if self._xid is None:
            return True
        stopped = self._xid.stop(timeout=self.xid_wait_ms / 1000.0 + 2.0)
        if stopped:
            self._last_xid.update(self._xid.drain().last)
            self._xid = None
        return stopped

    def _streams(self) -> list[GpmStream]:
        out = []
        for g in self._gpus:
            if g.gpm is not None:
                out.append(g.gpm)
            out.extend(m.gpm for m in g.migs if m.gpm is not None)
        return out

    def _shutdown(self) -> None:
        nv = self._nv
        if self._inits > 0:
            for stream in self._streams():
                stream.free(nv)
        while self._inits > 0:
            self._inits -= 1
            try:
                nv.nvmlShutdown()
            except nv.NVMLError as e:
                log.debug("nvmlShutdown: %s", e)

    # --- static facts --------------------------------------------------------------------------------
    def _driver_errors(self) -> tuple[type[Exception], ...]:
        nv = self._nv
        return (nv.NVMLError_DriverNotLoaded, nv.NVMLError_Uninitialized, nv.NVMLError_LibRmVersionMismatch)

    def _enumerate(self) -> None:
        """Read the GPU list and each GPU's static facts (a GPU that fails stays unknown, retried later)."""
        nv = self._nv
        try:
            self.driver_version = str(nv.nvmlSystemGetDriverVersion())
            count = nv.nvmlDeviceGetCount()
        except self._driver_errors() as e:
            raise _DriverGone(str(e)) from None
        self._gpus = [_Gpu(index=i) for i in range(count)]
        for g in self._gpus:
            try:
                self._read_static(g)
            except nv.NVMLError as e:
                self._log_once(
                    ("static", str(g.index)), "NVML: GPU %d static info unreadable (%s)", g.index, e
                )

    def _read_static(self, g: _Gpu) -> None:
        nv = self._nv
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(g.index)
            uuid = str(nv.nvmlDeviceGetUUID(handle))
            name = str(nv.nvmlDeviceGetName(handle))
            bus_id = nv.nvmlDeviceGetPciInfo(handle).busId
        except self._driver_errors() as e:
            raise _DriverGone(str(e)) from None
        g.handle, g.uuid, g.name = handle, uuid, name
        g.pci_bus_id = bus_id.decode("ascii", "replace") if isinstance(bus_id, bytes) else str(bus_id)
        g.migs = self._read_migs(g)
        g.known = True
        if self.gpm:
            self._setup_gpm(g)

    # --- GPM -----------------------------------------------------------------------------------------
    def _count_once(self, counter: Counter[str], key: tuple[str, ...], kind: str) -> None:
        if key not in self._counted:
            self._counted.add(key)
            counter[kind] += 1

    def _setup_gpm(self, g: _Gpu) -> None:
        """GPM streams for the GPU and its MIG instances, primed; unsupported: logged and counted once."""
        nv = self._nv
        try:
            device_supported(nv, g.handle)
        except GpmUnsupported as e:
            self._count_once(self._pending_errors, ("gpm", g.uuid), e.kind)
            self._log_once(("gpm", g.uuid), "NVML: GPU %d (%s): %s; DCGM_FI_PROF_* not reported", g.index, g.uuid, e)
            return
        except self._driver_errors() as e:
            raise _DriverGone(str(e)) from None
        except nv.NVMLError as e:
            self._pending_errors["nvml_error"] += 1
            self._log_once(("gpm", g.uuid), "NVML: GPU %d (%s): GPM support query failed: %s", g.index, g.uuid, e)
            return
        g.gpm = self._new_stream(g.uuid, g.handle, None)
        for m in g.migs:
            m.gpm = self._new_stream(m.uuid, g.handle, m.gpu_instance_id)

    def _new_stream(self, key: str, handle: Any, gpu_instance_id: int | None) -> GpmStream | None:
        nv = self._nv
        stream = GpmStream(key, handle, gpu_instance_id)
        try:
            stream.allocate(nv)
        except nv.NVMLError as e:
            stream.free(nv)
            self._pending_errors["nvml_error"] += 1
            self._log_once(("gpm-alloc", key), "NVML: %s: GPM sample allocation failed: %s", key, e)
            return None
        try:
            stream.prime(nv)
        except nv.NVMLError as e:
            self._log_once(("gpm-read", key), "NVML: %s: GPM sample failed: %s (retried each collection)", key, e)
        return stream

    def _read_gpm(self, stream: GpmStream | None, out: dict[str, float], errors: Counter[str]) -> None:
        if stream is None or not stream.allocated:
            return
        nv = self._nv
        try:
            values, newly = stream.read(nv)
        except (nv.NVMLError_NotSupported, nv.NVMLError_NoPermission) as e:
            # allocated is empty from now on: never asked again.  NoPermission: the driver restricts
            # profiling counters to admin users (NVreg_RestrictProfilingToAdminUsers)
            stream.free(nv)
            kind = "not_supported" if isinstance(e, nv.NVMLError_NotSupported) else "no_permission"
            self._count_once(errors, ("gpm", stream.key), kind)
            self._log_once(("gpm", stream.key), "NVML: %s: GPM sample refused (%s); DCGM_FI_PROF_* not reported", stream.key, e)
            return
        except self._driver_errors() as e:
            raise _DriverGone(f"GPM: {e}") from None
        except nv.NVMLError as e:
            errors["nvml_error"] += 1
            self._log_once(("gpm-read", stream.key, str(e.value)), "NVML: %s: GPM read failed: %s", stream.key, e)
            return
        out.update(values)
        if newly:
            self._count_once(errors, ("gpm-metrics", stream.key, *(f.gpm_name for f in newly)), "not_supported")
            log.info(
                "NVML: %s: GPM metric(s) not supported, skipped: %s",
                stream.key,
                ", ".join(f"{f.gpm_name} ({f.dcgm_field})" for f in newly),
            )

    def _read_migs(self, g: _Gpu) -> tuple[_Mig, ...]:
        nv = self._nv
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(g.handle)
            if current != nv.NVML_DEVICE_MIG_ENABLE:
                return ()
            slots = nv.nvmlDeviceGetMaxMigDeviceCount(g.handle)
        except self._driver_errors() as e:
            raise _DriverGone(str(e)) from None
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound, nv.NVMLError_InvalidArgument):
            return ()  # not a MIG-capable GPU, or a driver without MIG
        migs: list[_Mig] = []
        for slot in range(slots):
            try:
                mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(g.handle, slot)
            except nv.NVMLError_NotFound:
                continue  # empty slot
            except nv.NVMLError as e:
                self._log_once(("mig", g.uuid, str(slot)), "NVML: GPU %s MIG slot %d: %s", g.uuid, slot, e)
                continue
            try:
                gi = int(nv.nvmlDeviceGetGpuInstanceId(mh))
                uuid = str(nv.nvmlDeviceGetUUID(mh))
                profile = mig_profile(str(nv.nvmlDeviceGetName(mh)))
            except nv.NVMLError as e:
                self._log_once(("mig", g.uuid, str(slot)), "NVML: GPU %s MIG slot %d: %s", g.uuid, slot, e)
                continue
            migs.append(_Mig(mh, gi, profile, uuid))
        return tuple(migs)

    # --- collection ----------------------------------------------------------------------------------
    def _collect_blocking(self, now: float) -> tuple[list[GpuSample], Counter[str]]:
        with self._lock:
            if self._nv is None or self._closed:
                raise SourceError("not_started", "the nvml source is not started (or already closed)")
            if self._need_init:
                self._reinit(now)
            errors: Counter[str] = Counter(self._pending_errors)
            self._pending_errors.clear()
            try:
                samples = [self._sample(g, errors) for g in self._gpus]
            except _DriverGone as e:
                self._lose_driver(now, str(e))
                raise SourceError(DRIVER_NOT_LOADED, f"NVML: {e}; re-initialising later") from None
            return self._attach_xids(samples, errors), errors

    def _lose_driver(self, now: float, why: str) -> None:
        log.warning("NVML: %s; re-initialising in %.0f s", why, self._init_backoff)
        self._need_init = True
        self._next_init_at = now + self._init_backoff
        self._init_backoff = min(self._init_backoff * 2, REINIT_BACKOFF[1])
        self._stop_xid()

    def _reinit(self, now: float) -> None:
        if now < self._next_init_at:
            raise SourceError(
                DRIVER_NOT_LOADED, f"NVML driver not loaded; next re-init in {self._next_init_at - now:.0f} s"
            )
        nv = self._nv
        self._shutdown()
        try:
            nv.nvmlInit()
            self._inits += 1
            self._enumerate()
        except (nv.NVMLError, _DriverGone) as e:
            self._lose_driver(now, str(e))
            raise SourceError(DRIVER_NOT_LOADED, f"NVML re-init failed: {e}") from None
        log.info("NVML re-initialised: driver %s, %d GPU(s)", self.driver_version, len(self._gpus))
        self._need_init = False
        self._init_backoff = REINIT_BACKOFF[0]
        self._start_xid()

    def _sample(self, g: _Gpu, errors: Counter[str]) -> GpuSample:
        if not g.known:
            try:
                self._read_static(g)
            except self._nv.NVMLError:
                errors["gpu_lost"] += 1
                return GpuSample(
                    index=g.index, uuid=g.uuid, pci_bus_id=g.pci_bus_id, model_name=g.name, lost=True
                )
        fields: dict[str, float] = {}
        try:
            for read in GPU_READS:
                self._apply(g.uuid, read, g.handle, fields, errors, core=read is MEMORY)
        except _Lost as e:
            errors["gpu_lost"] += 1
            if not g.lost:
                log.warning("NVML: GPU %d (%s) is lost: %s", g.index, g.uuid, e)
            g.lost = True
            return self._gpu_sample(
                g, {}, tuple(MigInstance(m.gpu_instance_id, m.profile, m.uuid) for m in g.migs)
            )
        if g.lost:
            log.warning("NVML: GPU %d (%s) answers again", g.index, g.uuid)
            g.lost = False
        self._read_gpm(g.gpm, fields, errors)
        migs = tuple(self._mig_instance(m, errors) for m in g.migs)
        return self._gpu_sample(g, fields, migs)

    def _mig_instance(self, m: _Mig, errors: Counter[str]) -> MigInstance:
        fields: dict[str, float] = {}
        try:
            for read in MIG_READS:
                self._apply(m.uuid, read, m.handle, fields, errors, core=False)
        except _Lost:
            errors["nvml_error"] += 1
            fields = {}
        else:
            self._read_gpm(m.gpm, fields, errors)
        return MigInstance(m.gpu_instance_id, m.profile, m.uuid, MappingProxyType(fields))

    def _gpu_sample(self, g: _Gpu, fields: dict[str, float], migs: tuple[MigInstance, ...]) -> GpuSample:
        return GpuSample(
            index=g.index,
            uuid=g.uuid,
            pci_bus_id=g.pci_bus_id,
            model_name=g.name,
            fields=MappingProxyType(fields),
            driver_version=self.driver_version,
            mig=migs,
            lost=g.lost,
        )

    def _apply(
        self, key: str, read: Read, handle: Any, out: dict[str, float], errors: Counter[str], *, core: bool
    ) -> None:
        """Run one read into ``out``; classify its NVML error (see the module docstring)."""
        nv = self._nv
        if read.name in self._gone or (key, read.name) in self._skip:
            return
        i = self._alt.get(read.name, 0)
        while i < len(read.calls):
            try:
                out.update(read.calls[i](nv, handle))
                return
            except nv.NVMLError_FunctionNotFound:
                i += 1
                self._alt[read.name] = i
                if i < len(read.calls):
                    log.info(
                        "NVML: %s missing from this driver; using %s", read.symbols[i - 1], read.symbols[i]
                    )
            except (nv.NVMLError_NotSupported, nv.NVMLError_NoPermission) as e:
                kind = "not_supported" if isinstance(e, nv.NVMLError_NotSupported) else "no_permission"
                self._skip.add((key, read.name))
                errors[kind] += 1
                log.info("NVML: %s on %s: %s; field(s) %s skipped", read.name, key, e, ", ".join(read.fields))
                return
            except (nv.NVMLError_GpuIsLost, nv.NVMLError_Unknown) as e:
                raise _Lost(f"{read.symbols[i]}: {e}") from None
            except self._driver_errors() as e:
                raise _DriverGone(f"{read.symbols[i]}: {e}") from None
            except nv.NVMLError as e:
                if core:
                    raise _Lost(f"{read.symbols[i]}: {e}") from None
                errors["nvml_error"] += 1
                self._log_once(
                    ("read", key, read.name, str(e.value)), "NVML: %s on %s: %s", read.name, key, e
                )
                return
        self._gone.add(read.name)
        errors["function_not_found"] += 1
        log.warning(
            "NVML: %s not in this driver (too old); %s not reported",
            "/".join(read.symbols),
            ", ".join(read.fields),
        )

    def _attach_xids(self, samples: list[GpuSample], errors: Counter[str]) -> list[GpuSample]:
        if self._xid is None:
            return samples
        drained = self._xid.drain()
        errors.update(drained.errors)
        self._last_xid.update(drained.last)
        out = []
        for s in samples:
            events = drained.events.get(s.uuid, ())
            fields = s.fields
            if not s.lost and s.uuid:
                if s.uuid in drained.last:
                    fields = MappingProxyType({**fields, XID_FIELD: float(drained.last[s.uuid])})
                elif s.uuid in drained.registered:
                    fields = MappingProxyType(
                        {**fields, XID_FIELD: 0.0}
                    )  # watched, none seen (as dcgm-exporter)
            out.append(dataclasses.replace(s, fields=fields, xid_events=events))
        return out

    def _log_once(self, key: tuple[str, ...], msg: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.warning(msg, *args)
