"""The queue-name mutating webhook: RayCluster / RayJob CREATE -> ``kueue.x-k8s.io/queue-name`` label.

The API server posts an ``admission.k8s.io/v1`` AdmissionReview to ``/mutate-ray``.  When the object
has no queue-name label, is not opted out (annotation ``queuepilot.io/skip-queue-name: "true"``),
has no controlling owner (a RayCluster made by a RayJob or RayService is queued through its owner,
as Kueue's own defaulting does) and its namespace maps to a LocalQueue in the configuration, the
answer carries a base64 JSONPatch that adds the label.  An existing label is never changed.

In dry-run (the controller's ``--dry-run``) the answer never carries a patch: it carries an
AdmissionReview warning saying what would have been set (``queuepilot dry-run: would set label
kueue.x-k8s.io/queue-name=team-a-queue``), which kubectl shows to the user, and is counted with
result ``WouldLabel``.

Errors, following the AdmissionReview API conventions:

* a body that is not an ``admission.k8s.io/v1`` AdmissionReview with a ``request.uid`` cannot be
  answered as a review at all: HTTP 400 with a one-line message (the API server then applies the
  webhook's ``failurePolicy``; the chart's default, Ignore, lets the object through unchanged).
  That includes bodies the JSON parser refuses to follow: nesting deeper than Python's recursion
  limit, integers longer than Python converts (4300 digits); a body over ``MAX_BODY_BYTES`` is
  answered 413, one that could build more than ``MAX_REVIEW_VALUES`` JSON values 413 too (before it
  is parsed), and one that does not arrive within the server's body timeout 408; each of these is
  counted as ``BadRequest``;
* a review whose uid is known but whose object is malformed, or of a kind this webhook does not
  handle, is answered ``allowed: true`` without a patch and with a warning the user sees in kubectl.

This webhook never denies a request.  Every review is reported to an optional ``on_review(kind,
result)`` callback (bounded values: ``KINDS`` + ``"Other"``, ``RESULTS``) for a metric.
Served over TLS only (``start_webhook`` / ``run_webhook``; see ``autoscaler.webhook.tls``) by
``servicekit.http``: header and body timeouts, a connection cap, size limits, throttled one-line
logs for malformed requests.

It shares the controller's process, so what a flood of reviews can cost is bounded (:data:`LIMITS`):
the body limit is what the API server itself can send for a CREATE of the objects it mutates (the
object of a write request, at most the API server's own request-body limit, plus the review's
envelope), at most ``MAX_IN_FLIGHT`` reviews are read and answered at once (the others wait, their
bodies unread; 503 after the body timeout), bodies over ``THREAD_PARSE_BYTES`` are decoded in a
worker thread with the value bound of ``servicekit.boundedjson``, and reviews are logged in aggregate:
the first labelling of a result is one INFO line, the next ones at most one line a minute that says
how many were left out (every review is still counted by ``on_review``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from autoscaler.webhook.tls import CertReloader, cert_paths, make_server_ssl_context
from servicekit import http as servicekit_http
from servicekit.boundedjson import NotJson, TooLarge, loads_bounded
from servicekit.http import HttpServer, Limits, start_server
from servicekit.listen import parse_listen as _parse_listen
from servicekit.logthrottle import ThrottledLog

log = logging.getLogger("queuepilot.webhook")

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
DEFAULT_OPT_OUT_ANNOTATION = "queuepilot.io/skip-queue-name"
WEBHOOK_PATH = "/mutate-ray"
REVIEW_API_VERSION = "admission.k8s.io/v1"
RAY_GROUP = "ray.io"
KINDS = ("RayCluster", "RayJob")
# The API server refuses a write request whose body is over 3 MiB (its default request-body limit; etcd
# then keeps at most 1.5 MiB per object), and the reviews this webhook is sent are for CREATE only, so
# the object in a review is at most that; the envelope (uid, kind, resource, userInfo with its groups,
# options) is small.  A body over this is not a review the API server sends.
API_SERVER_MAX_OBJECT_BYTES = 3 * 2**20
REVIEW_ENVELOPE_BYTES = 256 * 2**10
MAX_BODY_BYTES = API_SERVER_MAX_OBJECT_BYTES + REVIEW_ENVELOPE_BYTES
# JSON values one review may build: a RayCluster of 3 MiB holds a few thousand (pod templates with env
# lists); 200 000 leaves a wide margin and keeps a parsed review within tens of MiB.
MAX_REVIEW_VALUES = 200_000
MAX_IN_FLIGHT = 4  # reviews read and answered at once
THREAD_PARSE_BYTES = 64 * 2**10  # larger bodies are decoded in a worker thread
LOG_INTERVAL = 60.0  # seconds between two aggregated review lines of the same result
# the API server's webhook call times out after 10 s by default (30 s at most): a body slower than that is no
# review; the rest of a refused body is read (and decrypted) for 0.1 s only, so refusing a flood of them costs
# little (a client that is still sending then may see the connection reset: for the API server that is the
# same failed call as the 413, and the failurePolicy applies)
LIMITS = Limits(max_body_bytes=MAX_BODY_BYTES, body_timeout=10.0, max_in_flight=MAX_IN_FLIGHT, lingering_time=0.1)

# Results (the ``result`` label of a review counter): fixed CamelCase constants.
LABELED = "Labeled"
WOULD_LABEL = "WouldLabel"  # dry-run: the label that would have been set, as a warning, no patch
LABEL_PRESENT = "LabelPresent"
NAMESPACE_UNMAPPED = "NamespaceUnmapped"
OPTED_OUT = "OptedOut"
OWNED = "OwnedByController"
NOT_CREATE = "NotCreate"
UNSUPPORTED_KIND = "UnsupportedKind"
MALFORMED_OBJECT = "MalformedObject"
BAD_REQUEST = "BadRequest"
INTERNAL_ERROR = "InternalError"
BUSY = "Busy"  # no review slot freed within the body timeout: answered 503 (the failurePolicy applies)
RESULTS = (LABELED, WOULD_LABEL, LABEL_PRESENT, NAMESPACE_UNMAPPED, OPTED_OUT, OWNED, NOT_CREATE, UNSUPPORTED_KIND,
           MALFORMED_OBJECT, BAD_REQUEST, INTERNAL_ERROR, BUSY)

OnReview = Callable[[str, str], None]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class BadReview(ValueError):
    """The body cannot be answered as an AdmissionReview (HTTP 400)."""


@dataclass(frozen=True)
class WebhookSettings:
    """The ``webhook:`` section of the controller's ``--config`` file."""

    namespace_queues: Mapping[str, str] = field(default_factory=dict)
    opt_out_annotation: str = DEFAULT_OPT_OUT_ANNOTATION


def webhook_settings(settings: Mapping[str, Any] | None) -> WebhookSettings:
    """Parse the ``webhook:`` section (``namespace_queues: {namespace: LocalQueue}``,
    ``opt_out_annotation``); ValueError naming the bad key or value."""
    section = (settings or {}).get("webhook") or {}
    if not isinstance(section, Mapping):
        raise ValueError("config section 'webhook' must be a mapping")
    unknown = set(section) - {"namespace_queues", "opt_out_annotation"}
    if unknown:
        raise ValueError(f"config webhook: unknown keys {sorted(unknown)} (known: namespace_queues, opt_out_annotation)")
    raw = section.get("namespace_queues") or {}
    if not isinstance(raw, Mapping):
        raise ValueError("config webhook.namespace_queues must map namespace -> LocalQueue name")
    queues: dict[str, str] = {}
    for ns, queue in raw.items():
        if not isinstance(ns, str) or not _DNS_LABEL.match(ns):
            raise ValueError(f"config webhook.namespace_queues: {ns!r} is not a namespace name")
        if not isinstance(queue, str) or not _DNS_SUBDOMAIN.match(queue):
            raise ValueError(f"config webhook.namespace_queues.{ns}: {queue!r} is not a LocalQueue name")
        queues[ns] = queue
    annotation = section.get("opt_out_annotation", DEFAULT_OPT_OUT_ANNOTATION)
    if not isinstance(annotation, str) or not annotation:
        raise ValueError("config webhook.opt_out_annotation must be a non-empty annotation key")
    return WebhookSettings(namespace_queues=queues, opt_out_annotation=annotation)


def json_pointer_token(key: str) -> str:
    """RFC 6901 escaping of one path segment: ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Verdict:
    """What to answer for one review: JSONPatch operations (or none), the result, a warning."""

    result: str
    patch: list[dict[str, Any]] | None = None
    warning: str | None = None
    queue: str | None = None


def decide(request: Mapping[str, Any], mapping: Mapping[str, str], opt_out_annotation: str) -> Verdict:
    """The pure decision for one ``AdmissionReview.request`` whose uid is known."""
    kind = request.get("kind")
    group, kind_name = (kind.get("group"), kind.get("kind")) if isinstance(kind, Mapping) else (None, None)
    if group != RAY_GROUP or kind_name not in KINDS:
        return Verdict(UNSUPPORTED_KIND, warning=f"queuepilot queue-name webhook: kind {group}/{kind_name} "
                       "is not handled (RayCluster, RayJob only); object left unchanged")
    if request.get("operation") != "CREATE":
        return Verdict(NOT_CREATE)
    obj = request.get("object")
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    if (not isinstance(obj, Mapping) or not isinstance(metadata, Mapping | None)
            or not isinstance(labels, Mapping | None) or not isinstance(annotations, Mapping | None)
            or not isinstance(owners, list | None)):
        return Verdict(MALFORMED_OBJECT, warning="queuepilot queue-name webhook: the object or its metadata is "
                       "malformed; queue-name label not set")
    if labels is not None and QUEUE_NAME_LABEL in labels:
        return Verdict(LABEL_PRESENT)
    if annotations and str(annotations.get(opt_out_annotation, "")).strip().lower() == "true":
        return Verdict(OPTED_OUT)
    if owners and any(isinstance(o, Mapping) and o.get("controller") is True for o in owners):
        return Verdict(OWNED)
    namespace = request.get("namespace") or (metadata or {}).get("namespace")
    queue = mapping.get(namespace) if isinstance(namespace, str) else None
    if queue is None:
        return Verdict(NAMESPACE_UNMAPPED)
    if metadata is None:
        op = {"op": "add", "path": "/metadata", "value": {"labels": {QUEUE_NAME_LABEL: queue}}}
    elif labels is None:
        op = {"op": "add", "path": "/metadata/labels", "value": {QUEUE_NAME_LABEL: queue}}
    else:
        op = {"op": "add", "path": "/metadata/labels/" + json_pointer_token(QUEUE_NAME_LABEL), "value": queue}
    return Verdict(LABELED, patch=[op], queue=queue)


class ReviewTooLarge(BadReview):
    """The body could build more JSON values than a review may (HTTP 413)."""


def parse_review(body: bytes, max_values: int = MAX_REVIEW_VALUES) -> dict[str, Any]:
    """The AdmissionReview ``request`` from a body; BadReview (HTTP 400) when it cannot be answered,
    ReviewTooLarge (HTTP 413) when it could build more than ``max_values`` JSON values."""
    try:
        review = loads_bounded(body, max_values)
    except TooLarge as e:
        raise ReviewTooLarge(f"request body is too large for a review: {e}") from None
    except NotJson as e:
        raise BadReview(f"request body is {e}") from None
    if not isinstance(review, dict):
        raise BadReview("request body is not a JSON object (expected an AdmissionReview)")
    if review.get("apiVersion") != REVIEW_API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReview(f"expected apiVersion {REVIEW_API_VERSION}, kind AdmissionReview; got "
                        f"{review.get('apiVersion')!r}, {review.get('kind')!r}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("AdmissionReview request has no uid")
    return request


def review_response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview answer for a verdict (always ``allowed: true``)."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(verdict.patch, separators=(",", ":")).encode()).decode()
    if verdict.warning:
        response["warnings"] = [verdict.warning]
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response}


class _ReviewLog:
    """Labelled (and would-label) reviews in aggregate: per result the first line at once, then at most one
    line per ``interval`` saying how many were not logged in between."""

    def __init__(self, interval: float = LOG_INTERVAL, clock: Any = time.monotonic) -> None:
        self._log = ThrottledLog(log, interval, clock=clock, max_keys=len(RESULTS))

    def __call__(self, result: str, message: str, *args: object) -> None:
        self._log.log(result, logging.INFO, message, *args)
        log.debug(message, *args)


class _LogOnce:
    """Log the first occurrence of each problem kind at WARNING, later ones at DEBUG."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, key: str, message: str, *args: object, exc_info: bool = False) -> None:
        level = logging.DEBUG if key in self._seen else logging.WARNING
        self._seen.add(key)
        log.log(level, message, *args, exc_info=exc_info)


def dry_run_verdict(verdict: Verdict) -> Verdict:
    """The dry-run form of a verdict: no patch; a labelling verdict becomes a warning saying what
    would have been set."""
    if verdict.result != LABELED:
        return verdict
    return Verdict(WOULD_LABEL, warning=f"queuepilot dry-run: would set label {QUEUE_NAME_LABEL}={verdict.queue}",
                   queue=verdict.queue)


def create_webhook_app(
    mapping: Mapping[str, str],
    opt_out_annotation: str = DEFAULT_OPT_OUT_ANNOTATION,
    on_review: OnReview | None = None,
    *,
    dry_run: bool = False,
    limits: Limits = LIMITS,
) -> web.Application:
    """The aiohttp app serving ``POST /mutate-ray`` (serve it only over TLS: ``start_webhook``).
    ``dry_run``: never patch, warn what would have been set."""
    queues = dict(mapping)
    log_once = _LogOnce()
    review_log = _ReviewLog()

    def count(kind: str, result: str) -> None:
        if on_review is None:
            return
        try:
            on_review(kind if kind in KINDS else "Other", result)
        except Exception:  # a broken metric callback must not fail admission
            log_once("callback", "webhook on_review callback failed", exc_info=True)

    async def mutate(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            if len(body) > THREAD_PARSE_BYTES:  # a large body is decoded off the event loop
                req = await asyncio.to_thread(parse_review, body)
            else:
                req = parse_review(body)
        except Exception as e:  # BadReview, or anything a hostile body provokes: never a 500
            message = str(e) if isinstance(e, BadReview) else f"request body cannot be read as a review ({type(e).__name__})"
            count("Other", BAD_REQUEST)
            log_once(BAD_REQUEST, "rejected a malformed AdmissionReview from %s: %s", request.remote, message)
            return web.json_response({"error": message}, status=413 if isinstance(e, ReviewTooLarge) else 400)
        kind = req.get("kind")
        kind_name = kind.get("kind") if isinstance(kind, Mapping) else None
        try:
            verdict = decide(req, queues, opt_out_annotation)
            if dry_run:
                verdict = dry_run_verdict(verdict)
        except Exception:  # a bug here must not block or break object creation
            log_once(INTERNAL_ERROR, "queue-name webhook failed on review %s", req["uid"], exc_info=True)
            verdict = Verdict(INTERNAL_ERROR, warning="queuepilot queue-name webhook: internal error; "
                              "queue-name label not set")
        count(str(kind_name), verdict.result)
        where = f"{req.get('namespace')}/{req.get('name') or '(generated name)'}"
        if verdict.result in (MALFORMED_OBJECT, UNSUPPORTED_KIND):
            log_once(verdict.result, "review %s of %s %s: %s", req["uid"], kind_name, where, verdict.warning)
        elif verdict.result == LABELED:
            review_log(LABELED, "labelled %s %s with %s=%s", kind_name, where, QUEUE_NAME_LABEL, verdict.queue)
        elif verdict.result == WOULD_LABEL:
            review_log(WOULD_LABEL, "dry-run: would label %s %s with %s=%s", kind_name, where, QUEUE_NAME_LABEL,
                       verdict.queue)
        return web.json_response(review_response(req["uid"], verdict))

    app = web.Application(client_max_size=limits.max_body_bytes)
    app.router.add_post(WEBHOOK_PATH, mutate)
    return app


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` / ``:PORT`` / ``[v6]:PORT`` -> (host, port); ValueError otherwise."""
    return _parse_listen(listen)


# what the HTTP layer refuses before a review is read: counted as reviews that could not be answered
_REFUSED_BODIES = frozenset({servicekit_http.TOO_LARGE, servicekit_http.BODY_TIMEOUT, servicekit_http.MALFORMED})


class WebhookServer:
    """A running TLS webhook server; ``port`` is the bound port, ``http`` the HTTP server (its
    ``rejected`` counts), ``close()`` stops it."""

    def __init__(self, http: HttpServer, reloader: CertReloader) -> None:
        self.http = http
        self.port = http.port
        self._reloader = reloader

    async def close(self) -> None:
        await self._reloader.stop()
        await self.http.close()


async def start_webhook(
    listen: str,
    certfile: str,
    keyfile: str,
    mapping: Mapping[str, str],
    *,
    opt_out_annotation: str = DEFAULT_OPT_OUT_ANNOTATION,
    on_review: OnReview | None = None,
    reload_seconds: float = 60.0,
    dry_run: bool = False,
    limits: Limits = LIMITS,
) -> WebhookServer:
    """Serve the webhook over TLS on ``listen``; the certificate files are re-read when they change
    (cert-manager rotation).  OSError when the address cannot be bound; ssl.SSLError / OSError for
    unreadable or mismatched certificate files; ValueError for a bad address."""
    if not certfile or not keyfile:
        raise ValueError("the webhook is served over TLS only: certfile and keyfile are required")
    address = _parse_listen(listen)
    ctx = make_server_ssl_context(certfile, keyfile)
    reloader = CertReloader(ctx, certfile, keyfile, interval=reload_seconds)

    def refused(kind: str) -> None:
        result = BAD_REQUEST if kind in _REFUSED_BODIES else BUSY if kind == servicekit_http.BUSY else None
        if result is not None and on_review is not None:
            try:
                on_review("Other", result)
            except Exception:
                log.debug("webhook on_review callback failed", exc_info=True)

    app = create_webhook_app(mapping, opt_out_annotation, on_review, dry_run=dry_run, limits=limits)
    http = await start_server(app, address, limits=limits, ssl_context=ctx, name="webhook", on_reject=refused)
    reloader.start()
    log.info("queue-name webhook serving https://%s:%s%s for %d namespace(s)%s", address.host, http.port,
             WEBHOOK_PATH, len(mapping), " (dry-run: answers carry warnings, never patches)" if dry_run else "")
    return WebhookServer(http, reloader)


async def run_webhook(
    listen: str,
    certfile: str,
    keyfile: str,
    mapping: Mapping[str, str],
    *,
    opt_out_annotation: str = DEFAULT_OPT_OUT_ANNOTATION,
    on_review: OnReview | None = None,
    dry_run: bool = False,
) -> None:
    """Serve until cancelled (run it as a task; cancel the task to stop)."""
    server = await start_webhook(listen, certfile, keyfile, mapping, opt_out_annotation=opt_out_annotation,
                                 on_review=on_review, dry_run=dry_run)
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()


__all__ = [
    "DEFAULT_OPT_OUT_ANNOTATION", "KINDS", "LIMITS", "MAX_BODY_BYTES", "MAX_IN_FLIGHT", "MAX_REVIEW_VALUES",
    "QUEUE_NAME_LABEL", "RESULTS", "WEBHOOK_PATH", "BadReview", "ReviewTooLarge",
    "Verdict", "WebhookServer", "WebhookSettings", "cert_paths", "create_webhook_app", "decide",
    "dry_run_verdict", "parse_review", "review_response", "run_webhook", "start_webhook", "webhook_settings",
]
