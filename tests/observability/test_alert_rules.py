"""The generated rule file: promtool lint and unit tests, test coverage of every alert, mixin conventions,
runbook anchors, generation-time settings, and the Alertmanager example."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from alerts.cli import main as alerts_main
from alerts.config import AlertConfig, ConfigError
from alerts.rules import SEVERITIES, alerts
from tests.observability.files import ALERT_TESTS_DIR, AM_EXAMPLE, RULE_FILE, RUNBOOKS
from tests.support.prometheus import promtool, require

DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def _test_files() -> list:
    files = sorted(ALERT_TESTS_DIR.glob("*.test.yaml"))
    assert files, "no promtool test files in alerts/tests"
    return files


def test_promtool_check_rules_lint_fatal(alert_rules):
    result = promtool("check", "rules", "--lint-fatal", str(RULE_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules)} rules found" in result.stdout


def test_promtool_unit_tests_pass():
    result = promtool("test", "rules", *map(str, _test_files()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(_test_files())


def test_unit_tests_notice_a_changed_threshold(tmp_path):
    """The unit tests pin behaviour: rules generated with another SLO fail them."""
    assert alerts_main(["--out", str(tmp_path / "generated"), "--set", "pending_slo_seconds=7200"]) == 0
    (tmp_path / "tests").mkdir()
    shutil.copy(ALERT_TESTS_DIR / "queues.test.yaml", tmp_path / "tests" / "queues.test.yaml")
    result = promtool("test", "rules", str(tmp_path / "tests" / "queues.test.yaml"))
    assert result.returncode == 1
    assert "QueuePilotPendingWorkloadTooOld" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_silent_case(alert_rules):
    """Every alert of both generated rule files (queuepilot-rules.yaml, queuepilot-economics.yaml)."""
    firing: dict[str, int] = {}
    silent: dict[str, int] = {}
    economics = yaml.safe_load((RULE_FILE.parent / "queuepilot-economics.yaml").read_text())["groups"]
    alert_rules = [*alert_rules, *(r for g in economics for r in g["rules"] if "alert" in r)]
    assert "QueuePilotTeamGpuWasteHigh" in {r["alert"] for r in alert_rules}
    for path in _test_files():
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] in (["../generated/queuepilot-rules.yaml"],
                                     ["../generated/queuepilot-economics.yaml"]), path.name
        for test in doc["tests"]:
            for case in test.get("alert_rule_test", []):
                name = case["alertname"]
                if case.get("exp_alerts"):
                    firing[name] = firing.get(name, 0) + 1
                    for exp in case["exp_alerts"]:
                        annotations = exp.get("exp_annotations", {})
                        assert {"summary", "description", "runbook_url"} <= set(annotations), name
                        assert "{{" not in annotations["description"], f"{name}: unrendered template"
                else:
                    silent[name] = silent.get(name, 0) + 1
    names = {r["alert"] for r in alert_rules}
    assert names - set(firing) == set(), f"alerts never tested firing: {names - set(firing)}"
    assert names - set(silent) == set(), f"alerts never tested silent: {names - set(silent)}"
    assert set(firing) | set(silent) <= names, "tests name alerts that do not exist"


def test_alert_conventions(rule_groups, alert_rules):
    runbook_text = RUNBOOKS.read_text()
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', runbook_text))
    anchors |= {h.strip().lower() for h in re.findall(r"^#+ (\S+)\s*$", runbook_text, re.M)}
    assert len({r["alert"] for r in alert_rules}) == len(alert_rules), "duplicate alert names"
    for g in rule_groups:
        assert re.fullmatch(r"queuepilot-[a-z]+", g["name"]), g["name"]
    for r in alert_rules:
        name = r["alert"]
        assert re.fullmatch(r"(GPU|QueuePilot)([A-Z][a-z0-9]*)+", name), f"{name}: UpperCamelCase with a prefix"
        assert r["labels"]["severity"] in SEVERITIES, name
        assert DURATION.match(r["for"]), f"{name}: for"
        a = r["annotations"]
        assert a["summary"].endswith(".") and "{{" not in a["summary"], f"{name}: summary without label values"
        assert "{{" in a["description"], f"{name}: description should carry values"
        assert a["runbook_url"].endswith("#" + name.lower()), name
        assert name.lower() in anchors, f"docs/runbooks.md has no anchor for {name}"
        # thresholds and durations are rendered, never left as placeholders
        assert "None" not in r["expr"] and "{" + "c." not in r["expr"]
    critical = {r["alert"] for r in alert_rules if r["labels"]["severity"] == "critical"}
    assert {"GPUFatalXid", "GPULost", "QueuePilotControllerNoLeader"} <= critical


def test_every_runbook_section_has_the_four_parts(alert_rules):
    text = RUNBOOKS.read_text()
    for r in alert_rules:
        name = r["alert"]
        start = text.index(f'<a id="{name.lower()}"></a>')
        end = text.find('<a id="', start + 1)
        section = text[start: end if end != -1 else len(text)]
        for part in ("Meaning", "Impact", "Diagnosis", "Mitigation"):
            assert f"**{part}**" in section, f"runbook for {name} lacks {part}"
        assert "```promql" in section or "kubectl" in section, f"runbook for {name} has no commands"


def test_set_changes_thresholds_durations_and_selectors(tmp_path):
    config = AlertConfig().with_settings([
        "pending_slo_seconds=7200", "idle_window=1h", "for.GPUFatalXid=30s",
        'exporter_selector=job="gpu"', "runbook_base_url=https://example.org/rb.md",
    ])
    by_name = {a.name: a.to_rule(config) for a in alerts(config)}
    assert by_name["QueuePilotPendingWorkloadTooOld"]["expr"].endswith("> 7200")
    assert "[1h]" in by_name["GPUAllocatedIdle"]["expr"]
    assert by_name["GPUFatalXid"]["for"] == "30s"
    assert by_name["GPULost"]["for"] == "1m"
    assert 'up{job="gpu"}' in by_name["QueuePilotExporterDown"]["expr"]
    assert by_name["GPULost"]["annotations"]["runbook_url"] == "https://example.org/rb.md#gpulost"
    # and the CLI writes a file promtool accepts
    assert alerts_main(["--out", str(tmp_path), "--set", "for.GPUFatalXid=30s"]) == 0
    written = yaml.safe_load((tmp_path / "queuepilot-rules.yaml").read_text())
    fatal = next(r for g in written["groups"] for r in g["rules"] if r["alert"] == "GPUFatalXid")
    assert fatal["for"] == "30s"
    assert promtool("check", "rules", "--lint-fatal", str(tmp_path / "queuepilot-rules.yaml")).returncode == 0


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("nonsense=1", "unknown setting 'nonsense'"),
        ("pending_slo_seconds=soon", "expects a number"),
        ("idle_window=5 minutes", "Prometheus duration"),
        ("for.GPULost=forever", "Prometheus duration"),
        ("no-equals-sign", "name=value"),
    ],
)
def test_bad_settings_are_rejected_clearly(tmp_path, capsys, setting, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        AlertConfig().with_settings([setting])
    assert alerts_main(["--out", str(tmp_path), "--set", setting]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "queuepilot-rules.yaml").exists()


def test_settings_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("QUEUEPILOT_ALERTS_SET", "retry_loop_count=3,retry_window=10m")
    assert alerts_main(["--out", str(tmp_path)]) == 0
    text = (tmp_path / "queuepilot-rules.yaml").read_text()
    assert '{state="Retry",mode!="dry_run"}[10m])) > 3' in text


def test_alertmanager_example_passes_amtool():
    result = subprocess.run(
        [require("amtool"), "check-config", str(AM_EXAMPLE)], capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_alertmanager_example_routes_and_inhibits_as_documented(alert_rules):
    """Critical pages, per-team namespaces route to their receivers, node-level alerts inhibit per-GPU ones."""
    config = yaml.safe_load(AM_EXAMPLE.read_text())
    receivers = {r["name"] for r in config["receivers"]}
    routes = config["route"]["routes"]
    for route in routes:
        assert route["receiver"] in receivers
    matchers = [m for r in routes for m in r.get("matchers", [])]
    assert any("severity" in m and "critical" in m for m in matchers)
    assert any("namespace" in m for m in matchers)
    gpu_alerts = {r["alert"] for r in alert_rules if r["alert"].startswith("GPU") and r["alert"] != "GPUNodeUnhealthy"}
    sources = set()
    for rule in config["inhibit_rules"]:
        assert "Hostname" in rule["equal"]
        source = " ".join(rule["source_matchers"])
        sources |= {a["alert"] for a in alert_rules if a["alert"] in source}
        target = re.search(r'alertname=~"([^"]+)"', " ".join(rule["target_matchers"]))
        if "GPUNodeUnhealthy" in source:  # the node-level rule covers every per-GPU alert
            assert target and all(re.fullmatch(target.group(1), a) for a in gpu_alerts)
    assert {"GPUNodeUnhealthy", "QueuePilotExporterDown", "QueuePilotExporterStale"} <= sources


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["alertname=GPUFatalXid", "severity=critical", "Hostname=node-a"], "platform-pager"),
        (["alertname=GPUUncorrectableEccErrors", "severity=critical", "namespace=team-b"], "platform-pager,team-b"),
        (["alertname=GPUAllocatedIdle", "severity=warning", "namespace=team-a"], "team-a"),
        (["alertname=QueuePilotPendingWorkloadTooOld", "severity=warning", "cluster_queue=cq-team-b"], "team-b"),
        (["alertname=QueuePilotControllerWatchRestarts", "severity=warning"], "platform-queue"),
        (["alertname=Anything", "severity=info", "namespace=team-a"], "null"),
    ],
)
def test_alertmanager_example_routes(labels, receivers):
    result = subprocess.run(
        [require("amtool"), "config", "routes", "test", f"--config.file={AM_EXAMPLE}", *labels],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == receivers
