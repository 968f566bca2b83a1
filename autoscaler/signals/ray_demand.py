"""The Ray signal: one RayCluster head's dashboard -> pending demand and node state.

Order of sources (``docs/ray-signal.md``):

1. ``/api/cluster_status`` JSON (autoscaler v1 report), fetched together with the node views
   (``/api/v0/nodes?detail=1`` and ``/nodes?view=summary``);
2. when it is all null (autoscaler v2, the KubeRay default, or no autoscaler) or fails: the
   state API (pending tasks, pending actors, placement groups) plus ``?format=1`` text, in
   parallel.  The state API wins (per-item kinds, INFEASIBLE vs NO_RESOURCES, ages); the text
   fills in placement-group strategies and ``request_resources`` bundles, and replaces the
   state API when all three of its lists failed.

A part that fails is recorded in ``RayStatus.errors`` (bounded ``part`` and ``kind``) and the
rest is still used; only when no demand source answered does :meth:`fetch_status` raise
:class:`RaySignalError`.  Authentication failures (401/403) raise at once.

What an answer may cost is bounded by ``autoscaler.signals.ray_limits``: each part's answer has a
byte cap and a cap on the JSON values it may build (over either: ``too_large``), the bytes of all
answers being read or parsed come from one process-wide budget, and large answers are parsed in a
worker thread one at a time.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp

from autoscaler.signals.ray_limits import ByteBudget, ParseGate, PartLimit, largest, part_limits
from autoscaler.signals.ray_parse import (
    ItemList,
    PendingItem,
    RayNodeInfo,
    RayParseError,
    RayPartError,
    RayResourceRequest,
    RayStatus,
    StatusReport,
    merge_nodes,
    parse_actors,
    parse_cluster_status,
    parse_cluster_status_format1,
    parse_nodes,
    parse_nodes_summary,
    parse_placement_groups,
    parse_tasks,
    to_demand,
    with_strategies,
)
from servicekit.boundedjson import NotJson, TooLarge, loads_bounded

__all__ = [
    "ERROR_KINDS",
    "RayDashboardClient",
    "RayNodeInfo",
    "RayPartError",
    "RayResourceRequest",
    "RaySignalError",
    "RayStatus",
]

log = logging.getLogger(__name__)

# auth: the head refused the token (401/403); credentials: the controller has no token to send
# (its Secret cannot be read); tls: the head's certificate was not accepted; too_large: an answer over
# its part's byte or JSON-value bound (autoscaler.signals.ray_limits).
ERROR_KINDS = ("timeout", "connect", "tls", "http_status", "parse", "auth", "credentials", "too_large")
THREAD_PARSE_BYTES = 2**20  # larger answers are decoded and parsed off the event loop

_PENDING_TASKS = (
    "/api/v0/tasks?filter_keys=state&filter_predicates=%3D&filter_values=PENDING_NODE_ASSIGNMENT&detail=1"
)
_PENDING_ACTORS = (
    "/api/v0/actors?filter_keys=state&filter_predicates=%3D&filter_values=PENDING_CREATION&detail=1"
)
_PLACEMENT_GROUPS = "/api/v0/placement_groups?detail=1"
_NODES = "/api/v0/nodes?detail=1"
_NODES_SUMMARY = "/nodes?view=summary"
_CLUSTER_STATUS = "/api/cluster_status"
_CLUSTER_STATUS_TEXT = "/api/cluster_status?format=1"

T = TypeVar("T")


class RaySignalError(Exception):
    """The head could not give a usable answer. ``kind`` is one of :data:`ERROR_KINDS`."""

    def __init__(self, kind: str, message: str, *, part: str | None = None) -> None:
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown RaySignalError kind {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.part = part


class RayDashboardClient:
    """Reads one Ray head's dashboard over HTTP.  Stateless between calls; share one per process.

    ``token``: the RayCluster's auth token (KubeRay ``authOptions.mode: token``), sent as
    ``authorization: Bearer <token>``; ``ssl``: the TLS context for ``https`` heads (None: the
    default, verifying context).  Both are per head: :meth:`bound` gives a client for one head that
    shares this one's session.  Redirects are never followed (a head must not send the token on to
    another address).  ``timeout``: seconds per request.  ``limit``: rows asked
    of each state-API list (Ray caps it at 10 000); a longer list is recorded as ``incomplete``.
    ``max_report_age``: a v1 report older than this (seconds, by its own ``time`` against
    ``now``) is from an autoscaler that stopped writing; the state API is used instead.
    ``limits``: part -> its bounds (default ``ray_limits.part_limits`` for ``limit`` rows; other parts
    get the largest); an answer over them is refused (``too_large``) without being read to the end or
    parsed.  ``budget`` / ``gate``: the process-wide byte budget (default: twice the largest answer)
    and parse gate, one each per client; :meth:`bound` copies share them.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        token: str | None = None,
        timeout: float = 5.0,
        limit: int = 2000,
        max_report_age: float = 120.0,
        limits: Mapping[str, PartLimit] | None = None,
        budget: ByteBudget | None = None,
        gate: ParseGate | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._session = session
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._limit = limit
        self._max_report_age = max_report_age
        self._limits = dict(limits) if limits is not None else part_limits(rows=limit)
        self._other = largest(self._limits)
        self.budget = budget or ByteBudget(2 * self._other.max_bytes)
        self.gate = gate or ParseGate()

    def bound(self, *, token: str | None, ssl_context: ssl.SSLContext | None = None) -> RayDashboardClient:
        """This client for one head: same session and limits, that head's token and TLS context."""
        c = copy.copy(self)
        c._headers = {"authorization": f"Bearer {token}"} if token else {}
        c._ssl = ssl_context if ssl_context is not None else True
        return c

    def _limit_of(self, part: str) -> PartLimit:
        return self._limits.get(part, self._other)

    # ------------------------------------------------------------------------------- transport
    async def get_bytes(self, base_url: str, path: str, part: str) -> bytes:
        """GET ``base_url + path``: the body of a 200 answer; every failure is a :class:`RaySignalError`.
        The body's bytes are given back to the budget before this returns (see :meth:`_fetch`)."""
        body = await self._fetch(base_url, path, part)
        self.budget.give(len(body))
        return body

    async def _fetch(self, base_url: str, path: str, part: str) -> bytes:
        """As :meth:`get_bytes`, but the body's bytes stay taken from the budget (the caller gives them back)."""
        url = base_url.rstrip("/") + path
        try:
            async with self._session.get(
                url, headers=self._headers, timeout=self._timeout, allow_redirects=False, ssl=self._ssl
            ) as resp:
                if resp.status in (401, 403):
                    raise RaySignalError(
                        "auth", f"{url}: HTTP {resp.status} (token missing or wrong)", part=part
                    )
                body = await _read_capped(resp, self._limit_of(part).max_bytes, self.budget, url, part)
                if resp.status != 200:
                    self.budget.give(len(body))
                    raise RaySignalError(
                        "http_status", f"{url}: HTTP {resp.status}: {_snippet(body)}", part=part
                    )
        except RaySignalError:
            raise
        except (TimeoutError, aiohttp.ServerTimeoutError) as e:
            raise RaySignalError(
                "timeout", f"{url}: no answer within {self._timeout.total} s", part=part
            ) from e
        except aiohttp.ClientPayloadError as e:
            raise RaySignalError("parse", f"{url}: broken body: {e}", part=part) from e
        except (aiohttp.ClientSSLError, ssl.SSLError) as e:
            raise RaySignalError("tls", f"{url}: {type(e).__name__}: {e}", part=part) from e
        except (aiohttp.ClientError, OSError) as e:
            raise RaySignalError("connect", f"{url}: {type(e).__name__}: {e}", part=part) from e
        return body

    async def get_json(self, base_url: str, path: str, part: str) -> Any:
        """GET and decode JSON (no shape check)."""
        return await self._get(base_url, path, part, lambda doc: doc)

    async def _get(self, base_url: str, path: str, part: str, parse: Callable[[Any], T]) -> T:
        body = await self._fetch(base_url, path, part)
        limit = self._limit_of(part)
        if len(body) > THREAD_PARSE_BYTES:  # ~0.06 s of CPU per MB: keep the event loop free
            size = len(body)
            return await self.gate.run(_decode_and_parse, body, part, parse, limit,
                                       release=lambda: self.budget.give(size))
        try:
            return _decode_and_parse(body, part, parse, limit)
        finally:
            self.budget.give(len(body))

    # ------------------------------------------------------------------------------- one source each
    async def cluster_status(self, base_url: str) -> StatusReport | None:
        """``/api/cluster_status`` JSON: the v1 report, or None (autoscaler v2 / none)."""
        return await self._get(base_url, _CLUSTER_STATUS, "cluster_status", parse_cluster_status)

    async def cluster_status_text(self, base_url: str) -> StatusReport | None:
        """``/api/cluster_status?format=1``: the ``ray status`` text, parsed."""
        return await self._get(
            base_url, _CLUSTER_STATUS_TEXT, "cluster_status_format1", parse_cluster_status_format1
        )

    async def pending_tasks(self, base_url: str) -> ItemList:
        return await self._get(base_url, f"{_PENDING_TASKS}&limit={self._limit}", "tasks", parse_tasks)

    async def pending_actors(self, base_url: str) -> ItemList:
        return await self._get(base_url, f"{_PENDING_ACTORS}&limit={self._limit}", "actors", parse_actors)

    async def placement_groups(self, base_url: str) -> ItemList:
        return await self._get(
            base_url, f"{_PLACEMENT_GROUPS}&limit={self._limit}", "placement_groups", parse_placement_groups
        )

    async def nodes(self, base_url: str) -> tuple[RayNodeInfo, ...]:
        """Node state only (both node views, joined)."""
        state, summary, errors = await self._node_views(base_url)
        if state is None and summary is None:
            raise _first_error(errors)
        return merge_nodes(state, summary)

    async def _node_views(self, base_url: str) -> tuple[Any, Any, list[RaySignalError]]:
        state, summary = await asyncio.gather(
            _catch(self._get(base_url, f"{_NODES}&limit={self._limit}", "nodes", parse_nodes)),
            _catch(self._get(base_url, _NODES_SUMMARY, "nodes_summary", parse_nodes_summary)),
        )
        errors = [r for r in (state, summary) if isinstance(r, RaySignalError)]
        _raise_auth(errors)
        return (
            None if isinstance(state, RaySignalError) else state,
            None if isinstance(summary, RaySignalError) else summary,
            errors,
        )

    # ------------------------------------------------------------------------------- orchestration
    async def fetch_status(self, base_url: str, now: float) -> RayStatus:
        """Pending demand and node state of the head at ``base_url`` (``http://host:8265``)."""
        status_r, (state_nodes, summaries, errors) = await asyncio.gather(
            _catch(self.cluster_status(base_url)), self._node_views(base_url)
        )
        if isinstance(status_r, RaySignalError):
            _raise_auth([status_r])
            errors.append(status_r)
            v1 = None
        else:
            v1 = status_r
        stale: list[RayPartError] = []
        if v1 is not None and v1.report_time is not None and now - v1.report_time > self._max_report_age:
            age = now - v1.report_time
            stale.append(
                RayPartError("cluster_status", "incomplete", f"autoscaler report is {age:.0f} s old")
            )
            v1 = None
        usage = v1.node_usage if v1 is not None else None
        nodes = merge_nodes(state_nodes, summaries, usage) if (state_nodes or summaries or usage) else ()

        if v1 is not None:
            return RayStatus(
                demand=to_demand(v1.items, nodes),
                nodes=nodes,
                source="cluster_status_v1",
                autoscaler_version="v1",
                observed_at=now,
                resource_requests=v1.requests,
                errors=_part_errors(errors),
            )

        tasks_r, actors_r, pgs_r, text_r = await asyncio.gather(
            _catch(self.pending_tasks(base_url)),
            _catch(self.pending_actors(base_url)),
            _catch(self.placement_groups(base_url)),
            _catch(self.cluster_status_text(base_url)),
        )
        lists = {"tasks": tasks_r, "actors": actors_r, "placement_groups": pgs_r}
        failed = [r for r in (*lists.values(), text_r) if isinstance(r, RaySignalError)]
        _raise_auth(failed)
        errors.extend(failed)
        text = None if isinstance(text_r, RaySignalError) else text_r
        got = {k: v for k, v in lists.items() if isinstance(v, ItemList)}
        version = text.autoscaler_version if text is not None else None

        if not got and text is None:
            if isinstance(text_r, RaySignalError):
                raise _first_error([status_r, *lists.values(), text_r])
            # every answer was fine, yet there is no report: no autoscaler has written one and
            # the state API failed; surface the state API's error.
            raise _first_error(list(lists.values()))

        if got:
            items: list[PendingItem] = []
            incomplete: list[RayPartError] = list(stale)
            for part, lst in got.items():
                items.extend(lst.items)
                if lst.truncated:
                    msg = f"{lst.returned} of {lst.total} rows (limit {self._limit})"
                    incomplete.append(RayPartError(part, "incomplete", msg))
                if lst.warning:
                    incomplete.append(RayPartError(part, "incomplete", lst.warning[:300]))
            created = [it.created_at for it in items if it.created_at is not None]
            return RayStatus(
                demand=to_demand(with_strategies(items, text), nodes),
                nodes=nodes,
                source="state_api",
                autoscaler_version=version,
                observed_at=now,
                resource_requests=text.requests if text is not None else (),
                oldest_pending_since=min(created) if created else None,
                errors=_part_errors(errors, incomplete),
            )

        assert text is not None
        return RayStatus(
            demand=to_demand(text.items, nodes),
            nodes=nodes,
            source="cluster_status_format1",
            autoscaler_version=version,
            observed_at=now,
            resource_requests=text.requests,
            errors=_part_errors(errors, stale),
        )


# ------------------------------------------------------------------------------------ helpers
async def _read_capped(resp: aiohttp.ClientResponse, cap: int, budget: ByteBudget, url: str, part: str) -> bytes:
    """The whole body (``content.read(n)`` may return less than a full body), at most ``cap`` bytes, each
    chunk taken from ``budget`` as it arrives; on any failure what was taken is given back."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in resp.content.iter_chunked(2**16):
            if size + len(chunk) > cap:
                raise RaySignalError("too_large", f"{url}: answer larger than {cap} bytes", part=part)
            await budget.take(len(chunk))
            size += len(chunk)
            chunks.append(chunk)
    except BaseException:
        budget.give(size)
        raise
    return b"".join(chunks)


def _decode_and_parse(body: bytes, part: str, parse: Callable[[Any], T], limit: PartLimit) -> T:
    """The parsed answer, or a RaySignalError that holds no reference to the decoded document: an error
    kept for the partial status (and its traceback) must not keep a large document alive."""
    try:
        doc = loads_bounded(body, limit.max_values, max_containers=limit.max_containers)
    except TooLarge as e:
        raise RaySignalError("too_large", f"{part}: answer too large: {e}", part=part) from None
    except NotJson as e:
        raise RaySignalError("parse", f"{part}: {e}: {_snippet(body)}", part=part) from None
    try:
        return parse(doc)
    except RayParseError as e:
        message = f"{part}: {e}"
    except (TypeError, KeyError, IndexError, AttributeError, ValueError) as e:  # a shape no check foresaw
        message = f"{part}: unexpected shape: {type(e).__name__}: {e}"
    del doc
    raise RaySignalError("parse", message, part=part)


async def _catch(aw: Awaitable[T]) -> T | RaySignalError:
    try:
        return await aw
    except RaySignalError as e:
        return e


def _raise_auth(errors: list[Any]) -> None:
    """A refused token or certificate fails every part the same way: give up on the head at once."""
    for e in errors:
        if isinstance(e, RaySignalError) and e.kind in ("auth", "tls"):
            raise e


_PRIORITY = {"credentials": 0, "auth": 0, "tls": 1, "connect": 1, "timeout": 2, "http_status": 3, "too_large": 4,
             "parse": 4}


def _first_error(candidates: list[Any]) -> RaySignalError:
    errors = [e for e in candidates if isinstance(e, RaySignalError)]
    if not errors:
        return RaySignalError("parse", "no demand source answered with a report")
    return min(errors, key=lambda e: _PRIORITY[e.kind])


def _part_errors(
    errors: list[RaySignalError], incomplete: list[RayPartError] | None = None
) -> tuple[RayPartError, ...]:
    out = tuple(RayPartError(part=e.part or "unknown", kind=e.kind, message=e.message) for e in errors)
    out += tuple(incomplete or ())
    for e in out:
        log.debug("ray signal part %s failed: %s: %s", e.part, e.kind, e.message)
    return out


def _snippet(body: bytes) -> str:
    return body[:200].decode("utf-8", "replace").replace("\n", " ")
