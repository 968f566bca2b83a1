"""The files the dashboards / alert-rules tests read (the generated dashboards and rules, the promtool rule
tests, the runbooks, the Alertmanager example), and walking a dashboard's panels."""

from __future__ import annotations

from tests.support.paths import REPO

DASHBOARD_DIR = REPO / "dashboards" / "generated"
RULE_FILE = REPO / "alerts" / "generated" / "queuepilot-rules.yaml"
ALERT_TESTS_DIR = REPO / "alerts" / "tests"
RUNBOOKS = REPO / "docs" / "runbooks.md"
AM_EXAMPLE = REPO / "alerts" / "alertmanager-example.yaml"


def panels(dashboard: dict) -> list[dict]:
    """Every panel, rows' nested panels included."""
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out

