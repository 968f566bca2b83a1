"""``dcgm``: scrape a co-located dcgm-exporter's ``/metrics`` and turn it into a sample.

``DcgmSource(hostname, url="http://127.0.0.1:9400/metrics", *, timeout=5.0)``.

Series are mapped to GPUs by their ``gpu`` / ``UUID`` labels (``uuid`` with dcgm-exporter's
``--use-old-namespace``); series with ``GPU_I_ID`` go to that MIG instance.  Every
``DCGM_FI_*`` family is kept: the catalog's (including ``DCGM_FI_PROF_*``) in ``fields``, any
other in ``extra`` (the collector passes those through as untyped families).  ``DCGM_EXP_*``
families carry extra labels (``xid``, ``clock_event``...) and are not mapped.  Pod labels that
dcgm-exporter added itself are kept unless the kubelet attribution runs (dcgm-exporter does not
expose MIG UUIDs, so MIG instances are attributed only through its own pod labels).

``DCGM_FI_DEV_XID_ERRORS`` holds only the *last* XID; a change of that value to a non-zero XID
becomes an XID event.  The value first seen is not an event (it happened before this exporter
started, at an unknown time, and may have been counted by the previous exporter process), but it is
not forgotten either: a non-zero first value is reported as ``GpuSample.xid_before_start`` on every
sample (health marks a drain-worthy one unhealthy, saying it was found at start) until the value
clears to 0, a new XID replaces it, or the GPU is reset.  A reset is seen as
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` going down (the driver restarts that counter when the GPU is
reset or the driver reloaded).

A whole failed scrape raises ``SourceError`` with a bounded kind: ``timeout``, ``connect``,
``http_status`` (not 200), ``parse`` (malformed exposition, an HTML page, no GPU series).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import MappingProxyType

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.metrics import DCGM_FIELD_NAMES, DRIVER_LABEL
from exporter.sample import FleetSample, GpuSample, MigInstance, PodRef
from exporter.sources.base import SourceError, SourceUnavailable

DEFAULT_URL = "http://127.0.0.1:9400/metrics"
ERROR_KINDS: tuple[str, ...] = ("timeout", "connect", "http_status", "parse")
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
ENERGY_FIELD = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"


@dataclass(slots=True)
class _Mig:
    profile: str
    uuid: str
    fields: dict[str, float] = field(default_factory=dict)
    pod: PodRef | None = None


@dataclass(slots=True)
class _Gpu:
    index: int
    uuid: str
    pci_bus_id: str = ""
    model_name: str = ""
    driver_version: str = ""
    pod: PodRef | None = None
    fields: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    mig: dict[int, _Mig] = field(default_factory=dict)


def _pod(labels: dict[str, str]) -> PodRef | None:
    pod = labels.get("pod") or labels.get("pod_name")
    if not pod:
        return None
    ns = labels.get("namespace") or labels.get("pod_namespace") or ""
    return PodRef(namespace=ns, pod=pod, container=labels.get("container") or labels.get("container_name") or "")


def parse_exposition(text: str) -> list[_Gpu]:
    """Pure: dcgm-exporter text -> per-GPU field maps. Raises ValueError on malformed text."""
    gpus: dict[str, _Gpu] = {}
    for family in text_string_to_metric_families(text):
        name = family.name
        if not name.startswith("DCGM_FI_"):
            continue
        for s in family.samples:
            labels = s.labels
            uuid = labels.get("UUID") or labels.get("uuid")
            index = labels.get("gpu")
            if uuid is None or index is None:
                continue  # NVLink / NVSwitch / CPU entities
            g = gpus.get(uuid)
            if g is None:
                g = gpus[uuid] = _Gpu(index=int(index), uuid=uuid)
            g.pci_bus_id = g.pci_bus_id or labels.get("pci_bus_id", "")
            g.model_name = g.model_name or labels.get("modelName", "")
            g.driver_version = g.driver_version or labels.get(DRIVER_LABEL, "")
            gi = labels.get("GPU_I_ID")
            if gi not in (None, ""):
                m = g.mig.get(int(gi))
                if m is None:
                    m = g.mig[int(gi)] = _Mig(profile=labels.get("GPU_I_PROFILE", ""), uuid="")
                m.fields[name] = s.value
                m.pod = m.pod or _pod(labels)
                continue
            g.pod = g.pod or _pod(labels)
            (g.fields if name in DCGM_FIELD_NAMES else g.extra)[name] = s.value
    if not gpus:
        raise ValueError("no per-GPU DCGM_FI_* series in the exposition")
    return sorted(gpus.values(), key=lambda g: g.index)


class DcgmSource:
    """Reads a dcgm-exporter over HTTP once per collection."""

    name = "dcgm"
    ERROR_KINDS = ERROR_KINDS

    def __init__(self, hostname: str, url: str = DEFAULT_URL, *, timeout: float = 5.0) -> None:
        self.hostname = hostname
        self.url = url
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._last_xid: dict[str, float] = {}
        self._xid_before_start: dict[str, int] = {}  # uuid -> non-zero last XID found at start, until cleared
        self._energy: dict[str, float] = {}  # uuid -> last DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION

    async def start(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise SourceUnavailable(f"--dcgm-url must be an http(s) URL of dcgm-exporter's /metrics, not {self.url!r}")
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _fetch(self) -> str:
        if self._session is None:
            await self.start()
        assert self._session is not None
        try:
            async with self._session.get(self.url, headers={"Accept": "text/plain"}) as resp:
                if resp.status != 200:
                    raise SourceError("http_status", f"dcgm-exporter {self.url} answered HTTP {resp.status}")
                if "html" in resp.headers.get("Content-Type", ""):
                    raise SourceError("parse", f"dcgm-exporter {self.url} answered an HTML page, not metrics")
                body = await resp.read()
        except TimeoutError as e:
            raise SourceError("timeout", f"dcgm-exporter {self.url} did not answer within {self.timeout}s") from e
        except aiohttp.ClientError as e:
            raise SourceError("connect", f"dcgm-exporter {self.url}: {type(e).__name__}: {e}") from e
        return body.decode("utf-8", errors="replace")

    async def collect(self, now: float) -> FleetSample:
        text = await self._fetch()
        try:
            parsed = await asyncio.to_thread(parse_exposition, text)
        except (ValueError, IndexError, KeyError) as e:
            raise SourceError("parse", f"dcgm-exporter {self.url}: malformed exposition: {e}") from e
        gpus: list[GpuSample] = []
        for g in parsed:
            events = self._xid_events(g, now)
            gpus.append(
                GpuSample(
                    index=g.index,
                    uuid=g.uuid,
                    pci_bus_id=g.pci_bus_id,
                    model_name=g.model_name,
                    fields=MappingProxyType(g.fields),
                    driver_version=g.driver_version,
                    mig=tuple(
                        MigInstance(gi, m.profile, m.uuid, MappingProxyType(m.fields), m.pod)
                        for gi, m in sorted(g.mig.items())
                    ),
                    pod=g.pod,
                    xid_events=events,
                    extra=MappingProxyType(g.extra),
                    xid_before_start=self._xid_before_start.get(g.uuid, 0),
                )
            )
        return FleetSample(taken_at=now, hostname=self.hostname, gpus=tuple(gpus), source=self.name)

    def _xid_events(self, g: _Gpu, now: float) -> tuple[tuple[int, float], ...]:
        """New XID events of one GPU; keeps ``_xid_before_start`` (see the module docstring)."""
        energy = g.fields.get(ENERGY_FIELD)
        if energy is not None:
            prev_energy = self._energy.get(g.uuid)
            if prev_energy is not None and energy < prev_energy:
                self._xid_before_start.pop(g.uuid, None)  # the GPU was reset (or the driver reloaded)
            self._energy[g.uuid] = energy
        xid = g.fields.get(XID_FIELD)
        if xid is None:
            return ()
        prev = self._last_xid.get(g.uuid)
        self._last_xid[g.uuid] = xid
        if prev is None:
            if xid > 0:
                self._xid_before_start[g.uuid] = int(xid)
            return ()
        if xid != prev:
            self._xid_before_start.pop(g.uuid, None)  # cleared, or replaced by a new XID
            if xid > 0:
                return ((int(xid), now),)
        return ()
