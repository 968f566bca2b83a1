"""XID critical-error events from NVML, watched in a thread of their own.

The thread registers ``nvmlEventTypeXidCriticalError`` on every device and loops on
``nvmlEventSetWait_v2(set, wait_ms)``; timeouts are the normal idle case.  Events are buffered
under a lock until the source's next collection drains them.  Where registration is refused it
retries with backoff (1 s doubling to 30 s, like nvidia_gpu_exporter) and counts
``xid_registration``; a failed wait (driver gone) counts ``xid_wait`` and re-registers later.
The bindings module is passed in: only ``exporter.sources.nvml`` imports ``pynvml``.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# (uuid, device handle) of every GPU to watch; called on each loop turn, so late-known GPUs are added
Devices = Callable[[], Sequence[tuple[str, Any]]]


def handle_address(handle: Any) -> int:
    """The device pointer behind a pynvml handle: NVML hands the same pointer back in event data."""
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


@dataclass(frozen=True, slots=True)
class XidDrain:
    """What the watcher saw since the last drain."""

    events: dict[str, tuple[tuple[int, float], ...]]  # uuid -> ((xid, unix time seen), ...)
    last: dict[str, int]  # uuid -> last XID ever seen (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS)
    registered: frozenset[str]  # uuids whose XID events are being watched
    errors: Counter[str]


class XidWatcher:
    """Owns one NVML event set and the thread that waits on it."""

    def __init__(
        self,
        nv: Any,
        devices: Devices,
        *,
        wait_ms: int,
        clock: Callable[[], float],
        backoff: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        self._nv = nv
        self._devices = devices
        self._wait_ms = int(wait_ms)
        self._clock = clock
        self._backoff_min, self._backoff_max = backoff
        self._stop = threading.Event()
        self._attempted = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self._last: dict[str, int] = {}
        self._registered: set[str] = set()
        self._errors: Counter[str] = Counter()
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)

    def start(self, first_attempt_timeout: float = 5.0) -> None:
        """Start the thread and wait until it has tried to register once (so no early event is missed)."""
        self._thread.start()
        self._attempted.wait(first_attempt_timeout)

    def stop(self, timeout: float) -> bool:
        """Ask the thread to finish (it does within one wait period); True if it has."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def seed_last(self, last: dict[str, int]) -> None:
        """Carry the last XID per GPU over from a previous watcher (after an NVML re-init)."""
        with self._lock:
            self._last.update(last)

    def drain(self) -> XidDrain:
        with self._lock:
            events = {uuid: tuple(evs) for uuid, evs in self._pending.items() if evs}
            self._pending.clear()
            errors, self._errors = self._errors, Counter()
            return XidDrain(events, dict(self._last), frozenset(self._registered), errors)

    # --- the thread ---------------------------------------------------------------------------------
    def _count(self, kind: str) -> None:
        with self._lock:
            self._errors[kind] += 1

    def _run(self) -> None:
        nv = self._nv
        es: Any = None
        by_address: dict[int, str] = {}
        backoff = self._backoff_min
        next_try = 0.0
        wait_s = self._wait_ms / 1000.0
        logged_refusal = False
        try:
            while not self._stop.is_set():
                devices = [(u, h) for u, h in self._devices() if u and h is not None]
                pending = [(u, h) for u, h in devices if u not in by_address.values()]
                if pending and time.monotonic() >= next_try:
                    es, failure = self._register(es, pending, by_address)
                    if failure is None:
                        backoff = self._backoff_min
                    else:
                        self._count("xid_registration")
                        if not logged_refusal:
                            log.warning(
                                "NVML refused XID event registration (%s); retrying with backoff up to %.0f s",
                                failure,
                                self._backoff_max,
                            )
                            logged_refusal = True
                        next_try = time.monotonic() + backoff
                        backoff = min(backoff * 2, self._backoff_max)
                self._attempted.set()
                if not by_address:
                    self._stop.wait(max(0.05, min(next_try - time.monotonic(), wait_s)))
                    continue
                try:
                    data = nv.nvmlEventSetWait_v2(es, self._wait_ms)
                except nv.NVMLError_Timeout:
                    continue
                except nv.NVMLError as e:
                    self._count("xid_wait")
                    log.warning("NVML event wait failed (%s); re-registering XID events later", e)
                    es = self._free(es)
                    by_address.clear()
                    with self._lock:
                        self._registered.clear()
                    next_try = time.monotonic() + backoff
                    backoff = min(backoff * 2, self._backoff_max)
                    continue
                if data.eventType & nv.nvmlEventTypeXidCriticalError:
                    uuid = by_address.get(handle_address(data.device))
                    if uuid is not None:
                        xid = int(data.eventData)
                        with self._lock:
                            self._pending[uuid].append((xid, self._clock()))
                            self._last[uuid] = xid
        finally:
            self._free(es)
            self._attempted.set()

    def _register(
        self, es: Any, pending: list[tuple[str, Any]], by_address: dict[int, str]
    ) -> tuple[Any, Exception | None]:
        nv = self._nv
        if es is None:
            try:
                es = nv.nvmlEventSetCreate()
            except nv.NVMLError as e:
                return None, e
        failure: Exception | None = None
        for uuid, handle in pending:
            try:
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, es)
            except nv.NVMLError as e:
                failure = e
                continue
            by_address[handle_address(handle)] = uuid
            with self._lock:
                self._registered.add(uuid)
        return es, failure

    def _free(self, es: Any) -> None:
        if es is not None:
            try:
                self._nv.nvmlEventSetFree(es)
            except self._nv.NVMLError as e:
                log.debug("nvmlEventSetFree failed: %s", e)
        return None
