"""``sim``: a simulated GPU fleet behind the same protocol as the real sources.

Constructor::

    SimSource(hostname, *, gpus=8, model="NVIDIA H100 80GB HBM3", seed=0, pods=None,
              fault_script=DEFAULT_FAULT_SCRIPT, driver_version="550.144.03", mig_gpus=0)

- ``gpus`` GPUs of ``model`` (frame-buffer size, power limit and clocks come from the model
  name: H100, H200, A100 40/80GB, L4; anything else gets its ``NNGB`` and a 300 W limit).
- ``pods``: the first half of the GPUs are allocated to simulated pods (Ray worker pods in
  ``team-*`` namespaces).  ``None`` puts two GPUs in each pod; an integer spreads that half over
  that many pods; ``0`` allocates nothing.
- Values are seeded by ``seed`` and driven by the ``now`` given to ``collect``: each pod's GPUs
  alternate busy phases (60-100 % utilization, 2-15 min) and idle phases (0 %, 1-7.5 min; about a
  third of the time: idle-but-allocated GPUs); free GPUs sit at 0 %.  Power, temperature (with
  thermal lag), SM clock, memory-copy utilization and the throttle bitmask follow utilization;
  frame-buffer use follows the pod (a loaded model stays resident while idle); energy integrates
  power.
- Profiling fields (``DCGM_FI_PROF_*``, as dcgm-exporter or the nvml source's GPM give them) follow
  the same utilization: ``GR_ENGINE_ACTIVE`` is the simulated utilization, and each pod runs a
  compute-bound, memory-bound or launch-bound ("light") job (``sim_profile``), so the SM, tensor
  and DRAM ratios tell those jobs apart the way they do on real GPUs.
- ``mig_gpus``: the last that many GPUs run in MIG mode with a mixed layout (3g + 2g + 1g + 1g);
  each GPU instance but the last is allocated to a pod of its own (resource
  ``nvidia.com/mig-<profile>``), has its own memory, utilization and profiling fields, and the
  parent GPU reports no ``DCGM_FI_DEV_GPU_UTIL`` (NVML does not give it in MIG mode).  Off by
  default, so the default fleet stays as it was.
- ``fault_script``: ``Fault`` events at seconds after the first ``collect``.  The default: a
  non-fatal XID 63 on GPU 0 at 30 s, a fatal XID 48 on GPU 1 at 60 s, and at 120 s XID 79 on the
  last GPU, which then falls off the bus (``lost``).  ``()`` disables it.

Drivable (the embedded demo): ``set_allocation(index, PodRef | None)``, ``set_load(index,
utilization_0_1 | None)`` (``None`` returns to the seeded pattern), ``inject_xid(index, xid)``,
``set_lost(index, lost)``.  Driven values are used as set from the next ``collect`` on.
"""

from __future__ import annotations

import math
import random
import re
import uuid
import zlib
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

from exporter.sample import FleetSample, GpuSample, MigInstance, PodRef
from exporter.sources.sim_profile import (
    DEFAULT_PROFILE,
    JobProfile,
    MigSlice,
    mig_layout,
    prof_fields,
    profile_for,
)


@dataclass(frozen=True, slots=True)
class Fault:
    at: float  # seconds after the first collect
    gpu: int  # index; negative counts from the end (-1 = last GPU)
    kind: Literal["xid", "lost", "recover"]
    xid: int = 0


DEFAULT_FAULT_SCRIPT: tuple[Fault, ...] = (
    Fault(30.0, 0, "xid", 63),
    Fault(60.0, 1, "xid", 48),
    Fault(120.0, -1, "xid", 79),
    Fault(120.0, -1, "lost"),
)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    fb_mib: float
    reserved_mib: float
    tdp_w: float
    idle_w: float
    sm_max_mhz: float
    mem_mhz: float


_MODELS: tuple[tuple[str, ModelSpec], ...] = (
    ("H200", ModelSpec(143771, 612, 700, 75, 1980, 3201)),
    ("H100", ModelSpec(81559, 591, 700, 70, 1980, 2619)),
    ("A100-SXM4-80GB", ModelSpec(81920, 554, 400, 55, 1410, 1593)),
    ("A100 80GB", ModelSpec(81920, 554, 400, 55, 1410, 1593)),
    ("A100", ModelSpec(40960, 414, 400, 50, 1410, 1215)),
    ("L4", ModelSpec(23034, 390, 72, 16, 2040, 6251)),
)
_H100_BUS_IDS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_NAMESPACES = ("team-a", "team-b", "team-c")
IDLE_SM_MHZ = 345.0
GPU_IDLE_BIT = 0x1
SW_POWER_CAP_BIT = 0x4


def model_spec(model: str) -> ModelSpec:
    for key, spec in _MODELS:
        if key in model:
            return spec
    m = re.search(r"(\d+)\s*GB", model)
    gb = float(m.group(1)) if m else 16.0
    return ModelSpec(gb * 1024, 400, 300, 40, 1800, 1500)


@dataclass(slots=True)
class _Workload:
    """Phases of one simulated pod: busy at ``level`` or idle, until ``phase_end``."""

    rng: random.Random
    busy: bool
    phase_end: float
    level: float
    mem_frac: float

    def advance(self, now: float) -> None:
        while now >= self.phase_end:
            self.busy = not self.busy
            dur = self.rng.uniform(120, 900) if self.busy else self.rng.uniform(60, 450)
            self.phase_end += dur
            if self.busy:
                self.level = self.rng.uniform(0.65, 0.95)


@dataclass(slots=True)
class _Gpu:
    index: int
    uuid: str
    pci_bus_id: str
    rng: random.Random
    pod: PodRef | None = None
    load: float | None = None  # driven utilization 0-1, None = seeded pattern
    lost: bool = False
    last_xid: int = 0
    energy_mj: float = 0.0
    temp_c: float | None = None
    last_t: float | None = None
    sbe_agg: float = 0.0
    corr_rows: float = 0.0
    prof_rng: random.Random | None = None
    mig: tuple[_Mig, ...] = ()


@dataclass(slots=True)
class _Mig:
    slice: MigSlice
    uuid: str
    pod: PodRef | None = None


PROF_RATIO_FIELDS_SUM = ("_BYTES",)  # profiling fields that add up over MIG instances (rates); the rest average


class SimSource:
    """A seeded, drivable simulated fleet (see the module docstring)."""

    name = "sim"

    def __init__(
        self,
        hostname: str,
        *,
        gpus: int = 8,
        model: str = "NVIDIA H100 80GB HBM3",
        seed: int = 0,
        pods: int | None = None,
        fault_script: tuple[Fault, ...] = DEFAULT_FAULT_SCRIPT,
        driver_version: str = "550.144.03",
        mig_gpus: int = 0,
    ) -> None:
        if gpus < 0:
            raise ValueError("gpus must be >= 0")
        if not 0 <= mig_gpus <= gpus:
            raise ValueError("mig_gpus must be within 0..gpus")
        self.hostname = hostname
        self.model = model
        self.spec = model_spec(model)
        self.seed = seed
        self.driver_version = driver_version
        self.fault_script = tuple(sorted(fault_script, key=lambda f: f.at))
        rng = random.Random(f"{seed}:{hostname}")
        self._gpus: list[_Gpu] = []
        for i in range(gpus):
            bus = _H100_BUS_IDS[i] if i < len(_H100_BUS_IDS) else 0x100 + i
            g = _Gpu(
                index=i,
                uuid=f"GPU-{uuid.UUID(int=rng.getrandbits(128), version=4)}",
                pci_bus_id=f"00000000:{bus:02X}:00.0",
                rng=random.Random(f"{seed}:{hostname}:{i}"),
                energy_mj=rng.uniform(1e9, 5e10),
                sbe_agg=float(rng.choice((0, 0, 0, 1, 3))),
                corr_rows=float(rng.choice((0, 0, 0, 0, 1))),
                prof_rng=random.Random(f"{seed}:{hostname}:{i}:prof"),
            )
            self._gpus.append(g)
        self._workloads: dict[PodRef, _Workload] = {}
        self._pending_xids: list[tuple[int, int, float | None]] = []  # (index, xid, at or None = next collect)
        self._t0: float | None = None
        self._faults_done = 0
        self._per_pod: dict[PodRef, int] = {}
        self._allocate_default(pods, rng)
        self._setup_mig(mig_gpus)

    # --- drivable API ----------------------------------------------------------------------------
    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(g.uuid for g in self._gpus)

    def allocation(self, index: int) -> PodRef | None:
        return self._gpus[index].pod

    def set_allocation(self, index: int, pod: PodRef | None) -> None:
        self._gpus[index].pod = pod

    def set_load(self, index: int, utilization_0_1: float | None) -> None:
        if utilization_0_1 is not None and not 0.0 <= utilization_0_1 <= 1.0:
            raise ValueError("utilization must be within 0..1")
        self._gpus[index].load = utilization_0_1

    def inject_xid(self, index: int, xid: int, at: float | None = None) -> None:
        """An XID event on GPU ``index``, reported at the next collection, stamped ``at`` (in the clock the
        source is collected with; default: the time of that collection)."""
        self._gpus[index]  # IndexError now, not at the next collect
        self._pending_xids.append((index, xid, at))

    def set_lost(self, index: int, lost: bool) -> None:
        self._gpus[index].lost = lost

    # --- GpuSource protocol ----------------------------------------------------------------------
    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def collect(self, now: float) -> FleetSample:
        return self.sample(now)

    def sample(self, now: float) -> FleetSample:
        """The synchronous body of ``collect`` (cheap: no I/O)."""
        if self._t0 is None:
            self._t0 = now
        self._run_faults(now)
        events: dict[int, list[tuple[int, float]]] = {}
        for index, xid, at in self._pending_xids:
            events.setdefault(index, []).append((xid, now if at is None else at))
        self._pending_xids.clear()
        out: list[GpuSample] = []
        lost = 0
        per_pod: dict[PodRef, int] = {}
        for g in self._gpus:
            if g.pod is not None:
                per_pod[g.pod] = per_pod.get(g.pod, 0) + 1
        self._per_pod = per_pod
        for g in self._gpus:
            xids = tuple(events.get(g.index, ()))
            if xids:
                g.last_xid = xids[-1][0]
            if g.lost:
                lost += 1
                g.last_t = now
                out.append(self._identity(g, fields={}, lost=True, xids=xids))
                continue
            if g.mig:
                out.append(self._mig_gpu(g, now, xids))
                continue
            out.append(self._identity(g, fields=self._fields(g, now), lost=False, xids=xids))
        errors = MappingProxyType({"gpu_lost": lost} if lost else {})
        return FleetSample(taken_at=now, hostname=self.hostname, gpus=tuple(out), source=self.name, errors=errors)

    # --- internals -------------------------------------------------------------------------------
    def _allocate_default(self, pods: int | None, rng: random.Random) -> None:
        allocated = len(self._gpus) // 2
        n_pods = max(1, allocated // 2) if pods is None else min(max(pods, 0), allocated)
        if allocated == 0 or n_pods == 0:
            return
        per, extra = divmod(allocated, n_pods)
        index = 0
        for p in range(n_pods):
            ns = _NAMESPACES[p % len(_NAMESPACES)]
            suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            ref = PodRef(namespace=ns, pod=f"ray-{ns}-gpu-worker-{suffix}", container="ray-worker")
            for _ in range(per + (1 if p < extra else 0)):
                self._gpus[index].pod = ref
                index += 1

    def _setup_mig(self, mig_gpus: int) -> None:
        """The last ``mig_gpus`` GPUs in MIG mode, each instance but the last with a pod (own RNG: the
        rest of the fleet is the same with or without MIG)."""
        rng = random.Random(f"{self.seed}:{self.hostname}:mig")
        n = len(self._gpus)
        for g in self._gpus[n - mig_gpus :]:
            g.pod, g.load = None, None
            layout = mig_layout(self.spec.fb_mib - self.spec.reserved_mib)
            migs = []
            for k, sl in enumerate(layout):
                mig_uuid = f"MIG-{uuid.UUID(int=rng.getrandbits(128), version=4)}"
                ns = _NAMESPACES[(g.index + k) % len(_NAMESPACES)]
                suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
                pod = None if k == len(layout) - 1 else PodRef(ns, f"{ns}-infer-{suffix}", "server")
                migs.append(_Mig(sl, mig_uuid, pod))
            g.mig = tuple(migs)

    def job_kind(self, index: int) -> str:
        """The kind of job (``compute``, ``memory``, ``light``) on a whole GPU's pod; "" when free."""
        pod = self._gpus[index].pod
        return "" if pod is None else self._profile(pod, self._per_pod).kind

    @property
    def mig_uuids(self) -> dict[int, tuple[str, ...]]:
        """GPU index -> the UUIDs of its MIG instances (MIG GPUs only)."""
        return {g.index: tuple(m.uuid for m in g.mig) for g in self._gpus if g.mig}

    def _profile(self, pod: PodRef | None, gpus_per_pod: dict[PodRef, int]) -> JobProfile:
        if pod is None:
            return DEFAULT_PROFILE
        return profile_for(f"{pod.namespace}/{pod.pod}", self.seed, multi_gpu=gpus_per_pod.get(pod, 1) > 1)

    def _run_faults(self, now: float) -> None:
        assert self._t0 is not None
        n = len(self._gpus)
        while self._faults_done < len(self.fault_script) and self._t0 + self.fault_script[self._faults_done].at <= now:
            f = self.fault_script[self._faults_done]
            self._faults_done += 1
            index = f.gpu if f.gpu >= 0 else n + f.gpu
            if not 0 <= index < n:
                continue
            if f.kind == "xid":
                self._pending_xids.append((index, f.xid, self._t0 + f.at))
            else:
                self._gpus[index].lost = f.kind == "lost"

    def _workload(self, pod: PodRef, now: float) -> _Workload:
        w = self._workloads.get(pod)
        if w is None:
            rng = random.Random(zlib.crc32(f"{self.seed}:{pod.namespace}/{pod.pod}".encode()))
            busy = rng.random() < 2 / 3
            end = now + (rng.uniform(120, 900) if busy else rng.uniform(60, 450)) * rng.random()
            w = _Workload(rng, busy, end, rng.uniform(0.65, 0.95), rng.uniform(0.45, 0.92))
            self._workloads[pod] = w
        w.advance(now)
        return w

    def _fields(self, g: _Gpu, now: float) -> dict[str, float]:
        spec, rng = self.spec, g.rng
        usable = spec.fb_mib - spec.reserved_mib
        if g.pod is not None:
            w = self._workload(g.pod, now)
            mem_frac = w.mem_frac
            util = g.load if g.load is not None else (w.level + rng.gauss(0, 0.04) if w.busy else 0.0)
        else:
            util = g.load if g.load is not None else 0.0
            mem_frac = 0.3 if util > 0 else 0.0
        if g.load is None and util > 0:
            util = min(1.0, max(util, 0.6))  # busy phases stay within 60-100 %
        dt = 0.0 if g.last_t is None else max(0.0, now - g.last_t)
        g.last_t = now
        power = spec.idle_w + (spec.tdp_w - spec.idle_w) * util**1.2
        power = min(spec.tdp_w, max(spec.idle_w * 0.9, power * (1 + rng.gauss(0, 0.015))))
        g.energy_mj += power * dt * 1000.0
        target = 30.0 + g.index % 3 + 45.0 * util
        g.temp_c = target if g.temp_c is None else target + (g.temp_c - target) * math.exp(-dt / 60.0)
        used = round(usable * mem_frac * (1 + rng.gauss(0, 0.002))) if mem_frac else 0.0
        throttle = GPU_IDLE_BIT if util == 0 else (SW_POWER_CAP_BIT if power >= 0.97 * spec.tdp_w else 0)
        return {
            "DCGM_FI_DEV_SM_CLOCK": spec.sm_max_mhz - round(15 * rng.random()) if util else IDLE_SM_MHZ,
            "DCGM_FI_DEV_MEM_CLOCK": spec.mem_mhz,
            "DCGM_FI_DEV_MEMORY_TEMP": round(g.temp_c + 6.0),
            "DCGM_FI_DEV_GPU_TEMP": round(g.temp_c),
            "DCGM_FI_DEV_POWER_USAGE": round(power, 3),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": round(g.energy_mj),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
            "DCGM_FI_DEV_GPU_UTIL": round(util * 100),
            "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 100 * 0.45),
            "DCGM_FI_DEV_ENC_UTIL": 0.0,
            "DCGM_FI_DEV_DEC_UTIL": 0.0,
            "DCGM_FI_DEV_XID_ERRORS": float(g.last_xid),
            "DCGM_FI_DEV_FB_FREE": usable - used,
            "DCGM_FI_DEV_FB_USED": used,
            "DCGM_FI_DEV_FB_RESERVED": spec.reserved_mib,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0.0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": g.corr_rows,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
            "DCGM_FI_DEV_ROW_REMAP_PENDING": 0.0,
            "DCGM_FI_DEV_RETIRED_SBE": 0.0,
            "DCGM_FI_DEV_RETIRED_DBE": 0.0,
            "DCGM_FI_DEV_RETIRED_PENDING": 0.0,
            "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": 0.0,
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 0.0,
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 0.0,
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 0.0,
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 0.0,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0.0,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0,
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": g.sbe_agg,
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 0.0,
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": float(throttle),
            **self._prof(g, util),
        }

    def _prof(self, g: _Gpu, util: float) -> dict[str, float]:
        assert g.prof_rng is not None
        return prof_fields(util, self._profile(g.pod, self._per_pod), g.prof_rng)

    def _mig_gpu(self, g: _Gpu, now: float, xids: tuple) -> GpuSample:
        """A MIG-mode GPU: per-instance memory, utilization and profiling; the parent has no GPU_UTIL."""
        assert g.prof_rng is not None
        migs: list[MigInstance] = []
        utils: list[tuple[float, float]] = []  # (utilization, share of the GPU)
        prof_sum: dict[str, float] = {}
        used_total = 0.0
        for m in g.mig:
            sl = m.slice
            util, mem_frac = 0.0, 0.0
            if m.pod is not None:
                w = self._workload(m.pod, now)
                mem_frac = w.mem_frac
                util = min(1.0, max(0.6, w.level + g.rng.gauss(0, 0.04))) if w.busy else 0.0
            used = round(sl.fb_mib * mem_frac) if mem_frac else 0.0
            used_total += used
            prof = prof_fields(util, self._profile(m.pod, {}), g.prof_rng)
            share = sl.slices / 7.0
            for k, v in prof.items():
                prof_sum[k] = prof_sum.get(k, 0.0) + (v if k.endswith(PROF_RATIO_FIELDS_SUM) else v * share)
            utils.append((util, share))
            fields = {
                "DCGM_FI_DEV_FB_USED": used,
                "DCGM_FI_DEV_FB_FREE": round(sl.fb_mib) - used,
                "DCGM_FI_DEV_FB_RESERVED": 0.0,
                **prof,
            }
            migs.append(MigInstance(sl.gpu_instance_id, sl.profile, m.uuid, MappingProxyType(fields), m.pod))
        parent_util = sum(u * s for u, s in utils)
        saved = g.load
        g.load = parent_util  # power, temperature and clocks follow the instances' work
        try:
            fields = self._fields(g, now)
        finally:
            g.load = saved
        for k in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL"):
            fields.pop(k, None)
        usable = self.spec.fb_mib - self.spec.reserved_mib
        fields["DCGM_FI_DEV_FB_USED"] = used_total
        fields["DCGM_FI_DEV_FB_FREE"] = usable - used_total
        fields.update({k: round(v, 6) for k, v in prof_sum.items()})
        return replace(self._identity(g, fields=fields, lost=False, xids=xids), mig=tuple(migs))

    def _identity(self, g: _Gpu, *, fields: dict[str, float], lost: bool, xids: tuple) -> GpuSample:
        return GpuSample(
            index=g.index,
            uuid=g.uuid,
            pci_bus_id=g.pci_bus_id,
            model_name=self.model,
            fields=MappingProxyType(fields),
            driver_version=self.driver_version,
            pod=g.pod,
            lost=lost,
            xid_events=xids,
        )
