"""One guarded write: every request the actuators make goes through ``WriteGuard.call``.

The guard is the one place that classifies a failed request, counts it, logs it, and keeps the
object's writes off the API server for a while.  Per object (``WriteKey``: resource, namespace,
name, uid) it keeps a failure streak:

- **409 Conflict** -> the first one is not backed off: the caller re-reads and writes again at once
  (check states) or decides again on the next pass (RayCluster patches pinned to a resourceVersion);
  a second 409 in a row on the same object starts a conflict backoff (``conflict_base`` doubling up
  to ``conflict_cap``, jittered), so a write that meets 409 forever (another writer that always
  wins, a broken precondition) is paced instead of repeated every pass; it is logged once when the
  backoff starts, with the count, and the count is logged again when a write succeeds;
- **404 Not Found** -> no backoff: the object is gone;
- **429 Too Many Requests** -> not before ``Retry-After`` (seconds or an HTTP date; a little jitter
  added, never less), else as a transient error;
- **other 4xx** (invalid, forbidden, gone, ...) -> the request will not succeed by itself: exponential
  backoff from ``refused_base`` up to ``refused_cap`` (minutes);
- **5xx, timeouts, connection errors, answers that do not parse** -> exponential backoff from ``transient_base`` up to
  ``transient_cap``.

Delays are jittered (``delay * (1 - jitter * U)``, U from an injectable ``random.Random``), and
the clock is always passed in (``now``).  While an object is in backoff ``blocked`` answers a
``skipped``/``backoff`` outcome and no request is made, so a refused write is not repeated on
every pass.  After ``warn_after`` failures in a row ``on_failing`` is called once for the streak
(the Kubernetes writer posts a Warning ``WritesFailing`` Event on the object); a success, or a
fresh read that shows nothing to write, ends the streak.  The first failure of a streak is logged
at WARNING (at most once a minute per resource and error kind, so a broken RBAC rule gives one line,
not one per object), the rest at DEBUG.  ``WriteCounters.objects_in_backoff`` gets the number of
objects with an open streak per resource after each change.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from autoscaler.act.outcome import WriteOutcome
from servicekit import errors
from servicekit.errors import error_kind

log = logging.getLogger(__name__)

T = TypeVar("T")

WRITES_FAILING = "WritesFailing"  # reason of the Warning Event on an object whose writes keep failing
NO_BACKOFF_KINDS = frozenset({errors.NOT_FOUND})
REFUSED_KINDS = frozenset({errors.INVALID, errors.FORBIDDEN, errors.CLIENT, errors.GONE})
LOG_EVERY = 60.0  # seconds between two WARNING lines for the same (resource, kind)
FORGET_AFTER = 3600.0  # a streak whose object was not tried for this long past its backoff is dropped


class WriteCounters(Protocol):
    """What the writers count (``autoscaler.controller.counters.ControllerCounters`` implements it)."""

    def write_done(self, resource: str, verb: str) -> None:
        """One write made (``queuepilot_writes_total``)."""
        ...

    def write_failed(self, resource: str, kind: str) -> None:
        """One write that failed, by bounded kind (``queuepilot_write_errors_total``)."""
        ...

    def objects_in_backoff(self, resource: str, count: int) -> None:
        """How many objects of ``resource`` have an open failure streak now."""
        ...

    def event_deduplicated(self) -> None:
        """An Event that already existed (posted before, e.g. by the previous leader) was not sent again."""
        ...


@dataclass(frozen=True, slots=True)
class WriteKey:
    """The object a write goes to; ``resource`` is the metric label (``workloads/status``, ...)."""

    resource: str
    api_version: str
    kind: str
    namespace: str  # "" for a cluster-scoped object
    name: str
    uid: str = ""

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    transient_base: float = 1.0  # 5xx, timeouts, connection errors, 429 without Retry-After
    transient_cap: float = 60.0
    refused_base: float = 10.0  # 4xx other than 404 / 409 / 429
    refused_cap: float = 600.0
    throttled_cap: float = 600.0  # a longer Retry-After is cut to this
    conflict_base: float = 0.5  # 409 Conflict from the (conflicts_free + 1)-th in a row on
    conflict_cap: float = 30.0
    conflicts_free: int = 1  # 409s in a row answered without backoff (re-read and write again at once)
    jitter: float = 0.5  # the delay is cut by up to this fraction at random
    warn_after: int = 3  # failures in a row before on_failing

    def delay(self, kind: str, failures: int, retry_after: float | None, rng: random.Random) -> float | None:
        """Seconds to keep the object's writes back after its ``failures``-th failure in a row (for a
        conflict: its ``failures``-th 409 in a row), or None for what is not backed off (not found, the
        first ``conflicts_free`` conflicts)."""
        if kind in NO_BACKOFF_KINDS:
            return None
        if kind == errors.CONFLICT:
            n = failures - self.conflicts_free
            if n <= 0:
                return None
            return min(self.conflict_cap, self.conflict_base * 2.0 ** min(n - 1, 62)) * (1.0 - self.jitter * rng.random())
        if kind == errors.THROTTLED and retry_after is not None:
            wait = min(max(0.0, retry_after), self.throttled_cap)
            return wait * (1.0 + 0.1 * rng.random())  # never before Retry-After; spread the herd
        base, cap = ((self.refused_base, self.refused_cap) if kind in REFUSED_KINDS
                     else (self.transient_base, self.transient_cap))
        full = min(cap, base * 2.0 ** min(max(0, failures - 1), 62))
        return full * (1.0 - self.jitter * rng.random())


@dataclass(frozen=True, slots=True)
class Failure:
    """A request that failed (what ``WriteGuard.call`` answers instead of the result)."""

    kind: str
    status: int | None
    error: BaseException
    backoff: float | None = None  # seconds the object is now held back (None: not backed off)

    @property
    def detail(self) -> str:
        """The API server's message (Status.message) or the exception's text, cut short."""
        body = getattr(self.error, "body", None)
        if isinstance(body, bytes | str):
            try:
                msg = json.loads(body).get("message")
                if isinstance(msg, str) and msg:
                    return msg[:300]
            except (ValueError, AttributeError):
                pass
        reason = getattr(self.error, "reason", None)
        return str(reason or self.error or type(self.error).__name__)[:300]


@dataclass(slots=True)
class _Streak:
    failures: int = 0
    until: float = 0.0
    kind: str = ""
    warned: bool = False


def retry_after(exc: BaseException, now: float) -> float | None:
    """Seconds from ``now`` that a 429/503 answer's ``Retry-After`` header asks to wait, or None."""
    headers = getattr(exc, "headers", None)
    if not headers:
        return None
    try:
        raw = headers.get("Retry-After")
    except AttributeError:
        return None
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(raw))
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


OnFailing = Callable[[WriteKey, str, float], None]


@dataclass
class WriteGuard:
    """Per-object backoff, counting and logging for the actuators' requests (see the module doc)."""

    counters: WriteCounters | None = None
    policy: BackoffPolicy = field(default_factory=BackoffPolicy)
    rng: random.Random = field(default_factory=random.Random)
    on_failing: OnFailing | None = None
    _streaks: dict[WriteKey, _Streak] = field(default_factory=dict, init=False)
    _conflicts: dict[WriteKey, int] = field(default_factory=dict, init=False)  # 409s in a row per object
    _logged: dict[tuple[str, str], float] = field(default_factory=dict, init=False)
    _pruned_at: float = field(default=float("-inf"), init=False)

    # ---- before a write
    def blocked(self, key: WriteKey, now: float) -> WriteOutcome | None:
        """``skipped``/``backoff`` while ``key`` is held back, else None (go ahead)."""
        self._prune(now)
        st = self._streaks.get(key)
        if st is None or now >= st.until:
            return None
        return WriteOutcome("skipped", "backoff", 0)

    def in_backoff(self, resource: str | None = None) -> int:
        """Objects (of ``resource``) with an open failure streak."""
        return sum(1 for k in self._streaks if resource is None or k.resource == resource)

    # ---- the request
    async def call(
        self, key: WriteKey, request: Callable[[], Awaitable[T]], now: float, *, expected: Container[int] = ()
    ) -> T | Failure:
        """Run ``request``; a failure is classified, counted, logged and backed off (see ``failed``).
        Statuses in ``expected`` (a 409 the caller retries at once, a 404 on a read) are answered as
        a ``Failure`` without counting or backoff."""
        try:
            return await request()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure of a request is classified here, nowhere else
            status = status_of(exc)
            if status is not None and status in expected:
                return Failure(error_kind(exc), status, exc)
            return self.failed(key, exc, now)

    def failed(self, key: WriteKey, exc: BaseException, now: float) -> Failure:
        kind = error_kind(exc)
        status = status_of(exc)
        if self.counters is not None:
            self.counters.write_failed(key.resource, kind)
        st = self._streaks.get(key)
        if kind == errors.CONFLICT:
            conflicts = self._conflicts[key] = self._conflicts.get(key, 0) + 1
            delay = self.policy.delay(kind, conflicts, None, self.rng)
        else:
            delay = self.policy.delay(kind, (st.failures if st else 0) + 1, retry_after(exc, now), self.rng)
        failure = Failure(kind, status, exc, delay)
        if delay is None:  # not found, a first conflict: the caller deals with it; not a streak
            log.debug("%s on %s: %s", key.resource, key, failure.detail)
            return failure
        if st is None:
            st = self._streaks[key] = _Streak()
            self._report(key.resource)
        st.failures += 1
        st.until = now + delay
        first = st.failures == 1 or st.kind != kind
        st.kind = kind
        if kind == errors.CONFLICT:
            self._log_conflict(key, failure, self._conflicts[key], first)
        else:
            self._log(key, failure, st, now, first)
        if st.failures >= self.policy.warn_after and not st.warned:
            st.warned = True
            if self.on_failing is not None:
                self.on_failing(key, self.failing_message(key, failure, st.failures), now)
        return failure

    # ---- after a write
    def succeeded(self, key: WriteKey, verb: str) -> None:
        """The write was made: count it and end the object's streak."""
        if self.counters is not None:
            self.counters.write_done(key.resource, verb)
        self.settled(key)

    def settled(self, key: WriteKey) -> None:
        """The object needs no write any more (written, unchanged, guarded off, gone): end its streak."""
        conflicts = self._conflicts.pop(key, 0)
        st = self._streaks.pop(key, None)
        if st is not None:
            what = f"{conflicts} conflicts" if st.kind == errors.CONFLICT else f"{st.failures} failures"
            log.info("%s on %s: writes succeed again after %s in a row", key.resource, key, what)
            self._report(key.resource)

    # ---- helpers
    @staticmethod
    def failing_message(key: WriteKey, failure: Failure, failures: int) -> str:
        code = f"{failure.status} " if failure.status else ""
        wait = f"; next attempt in {failure.backoff:.0f}s" if failure.backoff is not None else ""
        return (f"queuepilot cannot write {key.resource} of this object: {failures} failures in a row, "
                f"last {code}({failure.kind}): {failure.detail}{wait}")

    def _log(self, key: WriteKey, failure: Failure, st: _Streak, now: float, first: bool) -> None:
        slot = (key.resource, failure.kind)
        if first and now - self._logged.get(slot, float("-inf")) >= LOG_EVERY:
            self._logged[slot] = now
            log.warning("%s on %s failed (%s %s): %s; held back %.0fs, %d object(s) of %s in backoff",
                        key.resource, key, failure.status or "", failure.kind, failure.detail,
                        failure.backoff or 0.0, self.in_backoff(key.resource), key.resource)
        else:
            log.debug("%s on %s failed again (%d, %s); held back %.0fs", key.resource, key, st.failures,
                      failure.kind, failure.backoff or 0.0)

    @staticmethod
    def _log_conflict(key: WriteKey, failure: Failure, conflicts: int, first: bool) -> None:
        """Once per object when its conflict backoff starts (with the count), DEBUG after."""
        if first:
            log.warning("%s on %s: 409 Conflict %d times in a row (%s); writes held back %.1fs, doubling while "
                        "it lasts", key.resource, key, conflicts, failure.detail, failure.backoff or 0.0)
        else:
            log.debug("%s on %s: 409 Conflict again (%d in a row); held back %.1fs", key.resource, key, conflicts,
                      failure.backoff or 0.0)

    def _report(self, resource: str) -> None:
        if self.counters is not None:
            self.counters.objects_in_backoff(resource, self.in_backoff(resource))

    def _prune(self, now: float) -> None:
        """Forget streaks of objects nobody tried to write long after their backoff ended (deleted
        objects, decisions that went away), so the map and the gauge do not keep them forever."""
        if now - self._pruned_at < 60.0:
            return
        self._pruned_at = now
        stale = [k for k, st in self._streaks.items() if now - st.until > FORGET_AFTER]
        for k in stale:
            del self._streaks[k]
            self._conflicts.pop(k, None)
        # conflict counts of objects that never reached a backoff (one 409, then nothing more written)
        if len(self._conflicts) > 4 * len(self._streaks) + 1024:
            self._conflicts = {k: v for k, v in self._conflicts.items() if k in self._streaks}
        for resource in {k.resource for k in stale}:
            self._report(resource)
