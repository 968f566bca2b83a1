"""The custom ``prometheus_client`` Collector: renders the latest published state, nothing else.

The agent publishes an immutable :class:`ExporterState` after each collection; a scrape walks it
(a scrape never calls NVML, the dcgm-exporter or the kubelet).  The families come from
``exporter.metrics.CATALOG`` in catalog order, so the exposition cannot drift from the catalog:
every ``queuepilot_*`` catalog family has a builder in :data:`BUILDERS` (a test checks it), the
DCGM families are rendered from the sample's fields by name, and ``describe()`` lists the catalog.

Counters without ``_total``: dcgm-exporter exposes ``# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION
counter`` with samples of that exact name.  ``prometheus_client``'s ``generate_latest`` appends
``_total`` to counters (and to their HELP/TYPE lines only, for a raw ``Metric``), so DCGM
counters are :class:`ExactNameCounter` families and ``/metrics`` is written by
:func:`render_text`, a small text-format 0.0.4 writer that keeps the names, dcgm-exporter's
label order (``generate_latest`` sorts labels) and the counter type.  ``queuepilot_*`` counters
are ordinary ``name_total`` counters.  Only the 0.0.4 text format is served (as dcgm-exporter
does): OpenMetrics requires ``_total`` on counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from exporter import metrics as cat
from exporter.metrics import MetricSpec
from exporter.sample import FleetSample, GpuSample, MigInstance, PodRef

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
EXTRA_HELP = "Passed through unchanged from the co-located dcgm-exporter."


class ExactNameCounter(Metric):
    """A counter whose samples keep the family name, no ``_total`` (dcgm-exporter style)."""

    def __init__(self, name: str, documentation: str) -> None:
        super().__init__(name, documentation, "counter")


@dataclass(frozen=True, slots=True)
class ExporterState:
    """Everything one render shows. The agent replaces it whole; nothing in it is mutated."""

    hostname: str
    source: str
    sample: FleetSample | None = None
    # (source, kind) -> cumulative count; source is the GPU source's name or "pod_resources"
    errors_total: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    last_success: float | None = None
    pod_resources_up: bool = False
    # (GPU UUID, xid) -> cumulative count of XID events since the exporter started
    xid_totals: Mapping[tuple[str, int], int] = field(default_factory=lambda: MappingProxyType({}))


# --- labels -------------------------------------------------------------------------------------
def _gpu_prefix(g: GpuSample) -> dict[str, str]:
    return {"gpu": str(g.index), "UUID": g.uuid, "pci_bus_id": g.pci_bus_id, "device": g.device, "modelName": g.model_name}


def _pod_labels(labels: dict[str, str], pod: PodRef | None) -> dict[str, str]:
    if pod is not None:
        labels["container"] = pod.container
        labels["namespace"] = pod.namespace
        labels["pod"] = pod.pod
    return labels


def dcgm_labels(g: GpuSample, hostname: str, mig: MigInstance | None = None) -> dict[str, str]:
    """dcgm-exporter's order: gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID],
    Hostname, DCGM_FI_DRIVER_VERSION, container, namespace, pod (pod labels only when allocated)."""
    labels = _gpu_prefix(g)
    if mig is not None:
        labels["GPU_I_PROFILE"] = mig.profile
        labels["GPU_I_ID"] = str(mig.gpu_instance_id)
    labels["Hostname"] = hostname
    if g.driver_version:
        labels[cat.DRIVER_LABEL] = g.driver_version
    return _pod_labels(labels, mig.pod if mig is not None else g.pod)


def _identity_values(g: GpuSample, hostname: str) -> dict[str, str]:
    """A GPU's identity under both spellings the catalog uses (DCGM camelCase, queuepilot snake_case)."""
    return {
        "gpu": str(g.index),
        "UUID": g.uuid,
        "uuid": g.uuid,
        "pci_bus_id": g.pci_bus_id,
        "device": g.device,
        "modelName": g.model_name,
        "model_name": g.model_name,
        "Hostname": hostname,
        "hostname": hostname,
    }


def pick(spec: MetricSpec, values: dict[str, str]) -> dict[str, str]:
    """The spec's labels, in the spec's order; an optional label without a value is left out."""
    return {name: values[name] for name in spec.labels if name in values}


# --- family builders ----------------------------------------------------------------------------
def _family(spec: MetricSpec) -> Metric:
    if spec.type == "counter":
        if spec.name.endswith("_total"):
            return Metric(spec.name[: -len("_total")], spec.help, "counter")
        return ExactNameCounter(spec.name, spec.help)
    return Metric(spec.name, spec.help, spec.type)


def _add(m: Metric, spec: MetricSpec, labels: dict[str, str], value: float) -> None:
    m.samples.append(Sample(spec.name, labels, float(value), None, None))


def _dcgm_family(spec: MetricSpec, state: ExporterState, now: float) -> Metric:
    m = _family(spec)
    if state.sample is None:
        return m
    for g in state.sample.gpus:
        v = g.fields.get(spec.name)
        if v is not None:
            _add(m, spec, dcgm_labels(g, state.hostname), v)
        for mi in g.mig:
            v = mi.fields.get(spec.name)
            if v is not None:
                _add(m, spec, dcgm_labels(g, state.hostname, mi), v)
    return m


def _healthy(spec: MetricSpec, state: ExporterState, now: float) -> Metric:
    m = _family(spec)
    for g in state.sample.gpus if state.sample else ():
        values = _identity_values(g, state.hostname)
        values["reason"] = g.health.reason
        _add(m, spec, pick(spec, values), 1.0 if g.health.healthy else 0.0)
    return m


def _allocated(spec: MetricSpec, state: ExporterState, now: float) -> Metric:
    m = _family(spec)
    for g in state.sample.gpus if state.sample else ():
        allocated = g.pod is not None or any(mi.pod is not None for mi in g.mig)
        values = _pod_labels(_identity_values(g, state.hostname), g.pod)
        _add(m, spec, pick(spec, values), 1.0 if allocated else 0.0)
    return m


def _xid_total(spec: MetricSpec, state: ExporterState, now: float) -> Metric:
    m = _family(spec)
    if state.sample is None or not state.xid_totals:
        return m
    by_uuid = {g.uuid: g for g in state.sample.gpus}
    for (uuid, xid), count in sorted(state.xid_totals.items()):
        g = by_uuid.get(uuid)
        if g is not None:
            values = _identity_values(g, state.hostname)
            values["xid"] = str(xid)
            _add(m, spec, pick(spec, values), count)
    return m


def _per_source(value: Callable[[ExporterState, float], float | None]):
    def build(spec: MetricSpec, state: ExporterState, now: float) -> Metric:
        m = _family(spec)
        v = value(state, now)
        if v is not None:
            _add(m, spec, pick(spec, {"Hostname": state.hostname, "hostname": state.hostname, "source": state.source}), v)
        return m

    return build


def _errors(spec: MetricSpec, state: ExporterState, now: float) -> Metric:
    m = _family(spec)
    for (source, kind), count in sorted(state.errors_total.items()):
        values = {"Hostname": state.hostname, "hostname": state.hostname, "source": source, "kind": kind}
        _add(m, spec, pick(spec, values), count)
    return m


def _pod_resources_up(spec: MetricSpec, state: ExporterState, now: float) -> Metric:
    m = _family(spec)
    values = {"Hostname": state.hostname, "hostname": state.hostname}
    _add(m, spec, pick(spec, values), 1.0 if state.pod_resources_up else 0.0)
    return m


def _empty(spec: MetricSpec, state: ExporterState, now: float) -> Metric:
    return _family(spec)  # a catalog family with no builder yet (tests/exporter fail on it)


Builder = Callable[[MetricSpec, ExporterState, float], Metric]
BUILDERS: dict[str, Builder] = {
    cat.GPU_HEALTHY.name: _healthy,
    cat.GPU_ALLOCATED.name: _allocated,
    cat.GPU_XID_ERRORS_TOTAL.name: _xid_total,
    cat.EXPORTER_COLLECT_SECONDS.name: _per_source(lambda s, now: s.sample.collect_seconds if s.sample else None),
    cat.EXPORTER_SOURCE_ERRORS_TOTAL.name: _errors,
    cat.EXPORTER_LAST_SUCCESS.name: _per_source(lambda s, now: s.last_success),
    cat.EXPORTER_GPUS.name: _per_source(lambda s, now: len(s.sample.gpus) if s.sample else 0),
    cat.EXPORTER_SNAPSHOT_AGE.name: _per_source(lambda s, now: max(0.0, now - s.sample.taken_at) if s.sample else None),
    cat.EXPORTER_POD_RESOURCES_UP.name: _pod_resources_up,
}

def render_families(state: ExporterState | None, now: float) -> list[Metric]:
    """Every catalog family (in catalog order), then pass-through DCGM families. Pure."""
    if state is None:
        return []
    out: list[Metric] = []
    for spec in cat.CATALOG:
        builder = _dcgm_family if spec.name in cat.DCGM_FIELD_NAMES else BUILDERS.get(spec.name, _empty)
        out.append(builder(spec, state, now))
    extras: dict[str, Metric] = {}
    for g in state.sample.gpus if state.sample else ():
        for name, v in g.extra.items():
            m = extras.get(name)
            if m is None:
                m = extras[name] = Metric(name, EXTRA_HELP, "unknown")
            m.samples.append(Sample(name, dcgm_labels(g, state.hostname), float(v), None, None))
    out.extend(extras[k] for k in sorted(extras))
    return out


_AGE_SPEC = cat.EXPORTER_SNAPSHOT_AGE
_AGE_INDEX = cat.CATALOG.index(_AGE_SPEC)


class ExporterCollector(Collector):
    """Registered on a private ``CollectorRegistry``; ``publish`` swaps in the next state.

    The families of a state are built once, on the first scrape after ``publish``, and marked
    frozen so :func:`render_text` formats each only once; only the sample-age family (it depends
    on the scrape time) is rebuilt per scrape.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._state: ExporterState | None = None
        self._cache: tuple[ExporterState, list[Metric]] | None = None

    @property
    def state(self) -> ExporterState | None:
        return self._state

    def publish(self, state: ExporterState) -> None:
        self._state = state  # one reference swap: a concurrent scrape sees the old or the new state

    def describe(self) -> Iterable[Metric]:
        return [_family(spec) for spec in cat.CATALOG]

    def collect(self) -> Iterable[Metric]:
        state, now = self._state, self._clock()
        if state is None:
            return []
        cached = self._cache
        if cached is None or cached[0] is not state:
            families = render_families(state, now)
            for i, m in enumerate(families):
                if i != _AGE_INDEX:
                    m._qp_frozen = True  # never mutated again: render_text may keep its text
            self._cache = (state, families)
            return families
        families = list(cached[1])
        families[_AGE_INDEX] = BUILDERS[_AGE_SPEC.name](_AGE_SPEC, state, now)
        return families


def new_registry(collector: ExporterCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


# --- text format 0.0.4 ----------------------------------------------------------------------------
def _escape_label(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n")


def _header_name(m: Metric) -> str:
    if m.type == "counter" and not isinstance(m, ExactNameCounter):
        return m.name + "_total"
    return m.name


def _lines(m: Metric) -> Iterator[str]:
    name = _header_name(m)
    yield f"# HELP {name} {_escape_help(m.documentation)}\n"
    yield f"# TYPE {name} {'untyped' if m.type == 'unknown' else m.type}\n"
    for s in m.samples:
        if s.labels:
            labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels.items())
            yield f"{s.name}{{{labels}}} {floatToGoString(s.value)}\n"
        else:
            yield f"{s.name} {floatToGoString(s.value)}\n"


def family_text(m: Metric) -> str:
    """One family in text format 0.0.4 (kept on a frozen family: it is formatted once)."""
    text = getattr(m, "_qp_text", None)
    if text is None:
        text = "".join(_lines(m))
        if getattr(m, "_qp_frozen", False):
            m._qp_text = text
    return text


def render_text(registry: CollectorRegistry) -> bytes:
    """The registry's exposition in text format 0.0.4, names and label order as collected."""
    return "".join(family_text(m) for m in registry.collect()).encode("utf-8")
