"""Every metric name a dashboard or alert rule reads exists in a catalog or in the known external list."""

from __future__ import annotations

import re

import pytest

from alerts import economics
from autoscaler import metrics as controller_catalog
from exporter import metrics as exporter_catalog
from tests.observability.files import panels
from tests.observability.known_external_metrics import KNOWN_EXTERNAL
from tests.observability.promql_names import metric_names


def catalog_names() -> set[str]:
    names: set[str] = set()
    for spec in (*exporter_catalog.CATALOG, *controller_catalog.CATALOG):
        names.add(spec.name)
        if spec.type == "histogram":
            names |= {f"{spec.name}_bucket", f"{spec.name}_sum", f"{spec.name}_count"}
    return names


def used_names(dashboards: dict[str, dict], alert_rules: list[dict]) -> dict[str, set[str]]:
    """name -> where it is used."""
    used: dict[str, set[str]] = {}
    for fname, d in dashboards.items():
        exprs = [t["expr"] for p in panels(d) for t in p.get("targets", [])]
        exprs += [a["expr"] for a in d["annotations"]["list"]]
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                m = re.fullmatch(r"label_values\((.*),\s*\w+\)", v["query"]) or re.fullmatch(
                    r"query_result\((.*)\)", v["query"]
                )
                exprs.append(m.group(1))
        for e in exprs:
            for n in metric_names(e):
                used.setdefault(n, set()).add(fname)
    for r in alert_rules:
        for n in metric_names(r["expr"]):
            used.setdefault(n, set()).add(r["alert"])
    return used


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (a) (rate(x_total{l="b{c}"}[5m]))', {"x_total"}),
        ("a > on (job) group_left (Hostname) b and ignoring (x) c", {"a", "b", "c"}),
        ('label_replace(m{x=~"$v"}, "pod", "$1", "exported_pod", "(.+)")', {"m"}),
        ("deriv(sum(q:r)[$__rate_interval:]) > bool 1e3 unless absent(z)", {"q:r", "z"}),
        ("time() - ts offset 5m", {"ts"}),
    ],
)
def test_metric_name_extraction(expr, names):
    assert metric_names(expr) == names


def recorded_names() -> set[str]:
    """Series the economics recording rules write (alerts/economics.py)."""
    rules = economics.rule_file(economics.EconomicsConfig(prices=(("*", 1.0),)))
    return {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}


def test_every_used_metric_is_defined(dashboards, alert_rules):
    defined = catalog_names() | set(KNOWN_EXTERNAL) | recorded_names()
    used = used_names(dashboards, alert_rules)
    unknown = {n: sorted(w) for n, w in used.items() if n not in defined}
    assert not unknown, f"metrics in no catalog and not in known_external_metrics.py: {unknown}"


def test_known_external_list_has_no_stale_entries(dashboards, alert_rules):
    used = used_names(dashboards, alert_rules)
    stale = set(KNOWN_EXTERNAL) - set(used)
    assert not stale, f"listed as external but used nowhere: {stale}"
    assert not set(KNOWN_EXTERNAL) & catalog_names(), "an external name shadows a catalog name"


def test_every_dashboard_and_alert_reads_queuepilot_metrics(dashboards, alert_rules):
    """Sanity of the extraction itself: it finds catalog names in every dashboard and in the rules."""
    used = used_names(dashboards, alert_rules)
    for fname in dashboards:
        assert any(fname in where and n in catalog_names() for n, where in used.items()), fname
    assert len([n for n in used if n in catalog_names()]) >= 30


# labels every series may carry besides its catalog labels: Prometheus' target labels, the external
# `cluster` label, and the pod labels renamed by a ServiceMonitor without honorLabels
TARGET_LABELS = frozenset({"cluster", "job", "instance", "namespace", "pod", "container", "service", "endpoint"})
EXPORTED = frozenset({"exported_namespace", "exported_pod", "exported_container"})
SELECTOR = re.compile(r"\b([A-Za-z_:][\w:]*)\{([^{}]*)\}")
MATCHER = re.compile(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"')


def _allowed_labels(name: str) -> set[str] | None:
    for catalog in (exporter_catalog.BY_NAME, controller_catalog.BY_NAME):
        for suffix in ("", "_bucket", "_sum", "_count"):
            if suffix and not name.endswith(suffix):
                continue
            spec = catalog.get(name[: len(name) - len(suffix)] if suffix else name)
            if spec is not None:
                extra = {"le"} if suffix == "_bucket" else set()
                return set(spec.labels) | set(spec.optional_labels) | TARGET_LABELS | EXPORTED | extra
    return None


def test_selectors_use_the_catalog_label_names(dashboards, alert_rules):
    """A matcher on a label the family does not have (e.g. Hostname on a snake_case family) is a bug."""
    exprs = [(f, t["expr"]) for f, d in dashboards.items() for p in panels(d) for t in p.get("targets", [])]
    exprs += [(f, v["query"]) for f, d in dashboards.items() for v in d["templating"]["list"] if v["type"] == "query"]
    exprs += [(r["alert"], r["expr"]) for r in alert_rules]
    checked = 0
    for where, expr in exprs:
        for name, body in SELECTOR.findall(expr):
            allowed = _allowed_labels(name)
            if allowed is None:
                continue
            for label, _ in MATCHER.findall(body):
                checked += 1
                assert label in allowed, f"{where}: {name} has no label {label!r} (catalog: {sorted(allowed)})"
        for m in re.finditer(r"label_values\(([A-Za-z_:][\w:]*)(?:\{[^}]*\})?,\s*(\w+)\)", expr):
            allowed = _allowed_labels(m.group(1))
            if allowed is not None:
                assert m.group(2) in allowed, f"{where}: label_values of {m.group(2)} on {m.group(1)}"
    assert checked > 50
