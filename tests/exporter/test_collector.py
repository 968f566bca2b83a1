"""The collector: the catalog, exactly, in dcgm-exporter's names, types and label order."""

from __future__ import annotations

from types import MappingProxyType

from prometheus_client import CollectorRegistry

from exporter import metrics as cat
from exporter.collector import BUILDERS, ExporterCollector, ExporterState, new_registry, render_text
from exporter.sample import FleetSample, GpuSample, PodRef
from exporter.sources.sim import SimSource
from tests.exporter.expo import families, header_lines

ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"


def state_with_everything() -> tuple[ExporterState, SimSource]:
    source = SimSource("node-a", gpus=4, fault_script=())
    sample = source.sample(1_000.0)
    state = ExporterState(
        hostname="node-a", source="sim", sample=sample, last_success=1_000.0, pod_resources_up=True,
        errors_total=MappingProxyType({("sim", "gpu_lost"): 0, ("pod_resources", "socket_absent"): 2}),
        xid_totals=MappingProxyType({(source.uuids[1], 79): 1, (source.uuids[1], 63): 3}),
    )
    return state, source


def render(state: ExporterState, now: float = 1_005.0) -> str:
    collector = ExporterCollector(clock=lambda: now)
    registry = new_registry(collector)
    collector.publish(state)
    return render_text(registry).decode()


def expected_order(spec: cat.MetricSpec, present: list[str]) -> list[str]:
    """The spec's label order with the MIG labels where dcgm-exporter puts them (before Hostname)."""
    order = list(spec.labels)
    if "Hostname" in order and spec.name in cat.DCGM_FIELD_NAMES:
        i = order.index("Hostname")
        order[i:i] = list(cat.MIG_LABELS)
    return [label for label in order if label in present]


def test_every_catalog_family_appears_with_its_declared_type_and_labels() -> None:
    state, _ = state_with_everything()
    text = render(state)
    types = header_lines(text)
    for spec in cat.CATALOG:
        assert types.get(spec.name) == spec.type, spec.name  # the TYPE line names the family as cataloged
        lines = [line for line in text.splitlines() if line.startswith(spec.name + "{")]
        assert lines, f"{spec.name} has no series"
        fam = families(text)[spec.name.removesuffix("_total")]
        required = [lab for lab in spec.labels if lab not in spec.optional_labels]
        for sample in fam.samples:
            names = list(sample.labels)
            assert set(required) <= set(names), (spec.name, names)
            assert set(names) <= set(spec.labels) | set(cat.MIG_LABELS), (spec.name, names)
            assert names == expected_order(spec, names), (spec.name, names)


def test_every_queuepilot_family_has_a_builder() -> None:
    own = {s.name for s in cat.CATALOG if s.name not in cat.DCGM_FIELD_NAMES}
    assert own == set(BUILDERS)


def test_dcgm_counters_keep_their_exact_names() -> None:
    state, _ = state_with_everything()
    text = render(state)
    for spec in cat.DCGM_FAMILIES:
        if spec.type != "counter":
            continue
        assert f"# TYPE {spec.name} counter" in text
        samples = [line.split("{")[0] for line in text.splitlines() if line.startswith(spec.name)]
        assert samples and set(samples) == {spec.name}
    assert f"{ENERGY}_total" not in text
    assert "# TYPE queuepilot_gpu_xid_errors_total counter" in text


def test_pod_labels_only_when_allocated() -> None:
    state, source = state_with_everything()
    text = render(state)
    for line in (x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_GPU_UTIL{")):
        gpu = int(line.split('gpu="')[1].split('"')[0])
        pod = source.allocation(gpu)
        if pod is None:
            assert "pod=" not in line and "namespace=" not in line and "container=" not in line
        else:
            assert line.endswith(f'container="{pod.container}",namespace="{pod.namespace}",pod="{pod.pod}"}} '
                                 + line.rsplit(" ", 1)[1])


def test_self_metrics_and_health_values() -> None:
    state, _source = state_with_everything()
    collector = ExporterCollector(clock=lambda: 1_007.5)
    registry = new_registry(collector)
    collector.publish(state)
    host = {"hostname": "node-a", "source": "sim"}
    assert registry.get_sample_value("queuepilot_exporter_sample_age_seconds", host) == 7.5
    assert registry.get_sample_value("queuepilot_exporter_gpus", host) == 4
    assert registry.get_sample_value("queuepilot_exporter_last_success_timestamp_seconds", host) == 1_000.0
    assert registry.get_sample_value(
        "queuepilot_exporter_source_errors_total", {"hostname": "node-a", "source": "pod_resources", "kind": "socket_absent"}
    ) == 2
    g1 = state.sample.gpus[1]
    labels = {"gpu": "1", "uuid": g1.uuid, "pci_bus_id": g1.pci_bus_id, "device": "nvidia1",
              "model_name": g1.model_name, "hostname": "node-a"}
    assert registry.get_sample_value("queuepilot_gpu_xid_errors_total", {**labels, "xid": "63"}) == 3
    assert registry.get_sample_value("queuepilot_gpu_healthy", {**labels, "reason": ""}) == 1


def test_registering_does_not_collect_and_nothing_is_rendered_before_the_first_publish() -> None:
    calls = []

    class Counting(ExporterCollector):
        def collect(self):
            calls.append(1)
            return super().collect()

    collector = Counting()
    registry = CollectorRegistry()  # even an auto-describing registry uses our describe()
    registry.register(collector)
    assert calls == []
    assert render_text(registry) == b""


def test_label_values_are_escaped() -> None:
    gpu = GpuSample(index=0, uuid="GPU-1", pci_bus_id="b", model_name='odd "model" \\ name\nx',
                    fields=MappingProxyType({"DCGM_FI_DEV_GPU_UTIL": 5.0}), pod=PodRef("ns", "p", "c"))
    text = render(ExporterState("node-a", "sim", FleetSample(1.0, "node-a", (gpu,), "sim")), now=2.0)
    (sample,) = families(text)["DCGM_FI_DEV_GPU_UTIL"].samples
    assert sample.labels["modelName"] == 'odd "model" \\ name\nx'
    assert sample.value == 5.0


def test_a_scrape_reuses_the_rendered_state_until_the_next_publish() -> None:
    t = [1_000.0]
    source = SimSource("node-a", gpus=2, pods=0, fault_script=())
    collector = ExporterCollector(clock=lambda: t[0])
    registry = new_registry(collector)
    collector.publish(ExporterState("node-a", "sim", source.sample(1_000.0)))
    first = render_text(registry).decode()
    t[0] = 1_004.0
    second = render_text(registry).decode()
    age = "queuepilot_exporter_sample_age_seconds"
    assert [x for x in first.splitlines() if not x.startswith(age)] == [
        x for x in second.splitlines() if not x.startswith(age)
    ]
    assert registry.get_sample_value(age, {"hostname": "node-a", "source": "sim"}) == 4.0
    source.set_load(1, 0.5)
    collector.publish(ExporterState("node-a", "sim", source.sample(1_004.0)))
    labels = dict(families(render_text(registry).decode())["DCGM_FI_DEV_GPU_UTIL"].samples[1].labels)
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_UTIL", labels) == 50.0
