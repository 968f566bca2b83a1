"""docs/install.md and the chart's NOTES tell a person what they need, and what they show works:
the example values files install (schema and templates), every value they name exists, and the
shadow-mode promise is printed where people read it."""

from __future__ import annotations

import re

import pytest
import yaml

from dashboards.gpu_fleet import CLUSTER_QUEUE_LABEL, LOCAL_QUEUE_LABEL
from tests.chart.helm import CHART, RELEASE, notes, run_helm
from tests.support.paths import REPO

INSTALL = REPO / "docs" / "install.md"


def _yaml_blocks(text: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.S)


def _values_blocks() -> list[dict]:
    """The install guide's yaml blocks that are chart values (not Kubernetes objects)."""
    out = []
    for block in _yaml_blocks(INSTALL.read_text()):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and "apiVersion" not in doc and "kube-state-metrics" not in doc:
            out.append(doc)
    return out


def _paths(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict) and v and k not in ("namespace_queues", "labels", "for", "thresholds"):
            yield from _paths(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"


def test_install_guide_covers_the_path() -> None:
    text = INSTALL.read_text()
    for needle in (
        "docker build", "docker buildx build --platform linux/amd64,linux/arm64", "imagePullSecrets",
        "image.repository", "image.tag",
        "ElasticJobsViaWorkloadSlices", 'kueue.x-k8s.io/elastic-job: "true"', "v0.18", "v1.1",
        "--metric-labels-allowlist=pods=[kueue.x-k8s.io/local-queue-name,kueue.x-k8s.io/cluster-queue-name]",
        "controller.dryRun=true", "controller.dryRun=false", "mode=\"dry_run\"",
        "monitoring.jobNames", "runbookBaseUrl", "monitoring.alerts.thresholds",
        "## Upgrade", "## Uninstall", "status.admissionChecks",
    ):
        assert needle in text, needle
    # the allowlist names the labels the dashboard joins on (kube-state-metrics' label_<sanitised name>)
    for label in ("kueue.x-k8s.io/local-queue-name", "kueue.x-k8s.io/cluster-queue-name"):
        assert "label_" + re.sub(r"[^a-zA-Z0-9]", "_", label) in (LOCAL_QUEUE_LABEL, CLUSTER_QUEUE_LABEL)


@pytest.mark.parametrize("index", range(2))
def test_install_guide_values_files_install(index: int, tmp_path) -> None:
    blocks = _values_blocks()
    assert len(blocks) == 2, "the guide's values files: the dry-run install and the monitoring example"
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(blocks[index]))
    for helm in ("helm3", "helm4"):
        proc = run_helm(helm, "template", RELEASE, str(CHART), "-f", str(path))
        assert proc.returncode == 0, proc.stderr


def test_every_value_the_guide_names_exists() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    text = INSTALL.read_text()
    named = set(re.findall(r"`((?:image|controller|exporter|monitoring|config|webhook|networkPolicy)\.[A-Za-z0-9_.]+)", text))
    for block in _values_blocks():
        named |= set(_paths(block))
    named.discard("monitoring.coreos.com")  # the API group, not a value
    assert len(named) > 15
    missing = []
    for path in sorted(named):
        node = values
        for part in path.rstrip(".").split("."):
            if part == "*" or not isinstance(node, dict):
                break
            if part not in node:
                missing.append(path)
                break
            node = node[part]
    assert not missing, f"docs/install.md names values the chart does not have: {missing}"


def test_notes_state_the_shadow_mode() -> None:
    text = notes("helm4")  # the default
    assert text == notes("helm4", ("controller.dryRun=true",))
    for needle in ("Kueue admits exactly as it would without queuepilot", "set Ready at once",
                   "Normal Event", 'mode="dry_run"', "without a patch and with a warning",
                   "Ray scaling writes nothing", "--set controller.dryRun=false"):
        assert needle in text, needle
    assert "DRY RUN" not in notes("helm4", ("controller.dryRun=false",))


def _slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def test_install_guide_links_resolve() -> None:
    docs = REPO / "docs"
    text = INSTALL.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) > 10
    broken = []
    for link in links:
        if link.startswith("http"):
            continue
        path, _, anchor = link.partition("#")
        target = INSTALL if not path else (docs / path).resolve()
        if not target.exists():
            broken.append(link)
            continue
        if anchor and target.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", target.read_text(), flags=re.M)}
            if anchor not in slugs:
                broken.append(link)
    assert not broken, broken
