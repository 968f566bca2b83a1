"""The chart's controller RBAC grants exactly autoscaler/rbac.py CONTROLLER_API_CALLS, both ways."""

from __future__ import annotations

import pytest

from autoscaler.rbac import CONTROLLER_API_CALLS
from tests.chart.combos import COMBOS
from tests.chart.helm import HELMS, MAPPING, NAMESPACE, render

pytestmark = pytest.mark.e2e

Triple = tuple[str, str, str]


def expand(rules: list[dict]) -> set[Triple]:
    """(apiGroup, resource, verb) for every combination a rule grants; wildcards are refused."""
    out: set[Triple] = set()
    for rule in rules:
        assert "nonResourceURLs" not in rule, rule
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"wildcard in {field}: {rule}"
        out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def granted(docs, service_account: str) -> tuple[set[Triple], set[Triple]]:
    """(cluster-wide, release-namespace-only) triples bound to the service account."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("ClusterRole", "Role")}
    cluster: set[Triple] = set()
    namespaced: set[Triple] = set()
    for b in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == service_account and s["namespace"] == NAMESPACE
                   for s in b["subjects"]):
            continue
        role = roles[(b["roleRef"]["kind"], b["roleRef"]["name"])]
        triples = expand(role["rules"])
        if b["kind"] == "ClusterRoleBinding":
            cluster |= triples
        else:
            assert b["metadata"]["namespace"] == role["metadata"]["namespace"] == NAMESPACE
            namespaced |= triples
    return cluster, namespaced


def controller_sa(docs) -> str:
    dep = next(d for d in docs if d["kind"] == "Deployment")
    return dep["spec"]["template"]["spec"]["serviceAccountName"]


@pytest.mark.parametrize("helm", HELMS)
def test_controller_rbac_is_exactly_the_code_api_calls(helm: str) -> None:
    docs = render(helm, MAPPING).docs
    cluster, namespaced = granted(docs, controller_sa(docs))
    total = cluster | namespaced
    assert not total - CONTROLLER_API_CALLS, f"granted but never called: {sorted(total - CONTROLLER_API_CALLS)}"
    assert not CONTROLLER_API_CALLS - total, f"called but not granted: {sorted(CONTROLLER_API_CALLS - total)}"
    # the Lease is only needed in the release namespace, where the controller elects its leader
    assert {t for t in total if t[1] == "leases"} == namespaced
    assert not {t for t in cluster if t[1] == "leases"}


@pytest.mark.parametrize("helm", HELMS)
def test_lease_get_update_limited_to_our_lease(helm: str) -> None:
    docs = render(helm).docs
    role = next(d for d in docs if d["kind"] == "Role")
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    lease = next(a.split("=", 1)[1] for a in args if a.startswith("--lease-name="))
    for rule in role["rules"]:
        if set(rule["verbs"]) & {"get", "update"}:
            assert rule["resourceNames"] == [lease]


@pytest.mark.parametrize("helm", HELMS)
def test_without_leader_election_no_lease_rights(helm: str) -> None:
    docs = render(helm, COMBOS["scrape-dryrun-no-leader"].sets).docs
    cluster, namespaced = granted(docs, controller_sa(docs))
    assert namespaced == set()
    assert cluster == {t for t in CONTROLLER_API_CALLS if t[1] != "leases"}


@pytest.mark.parametrize("helm", HELMS)
def test_exporter_has_no_api_access(helm: str) -> None:
    docs = render(helm).docs
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    sa_name = ds["spec"]["template"]["spec"]["serviceAccountName"]
    assert granted(docs, sa_name) == (set(), set())
    sa = next(d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == sa_name)
    assert sa["automountServiceAccountToken"] is False


def test_expand_refuses_a_broader_grant() -> None:
    # the comparison above would see an extra verb or a wildcard
    extra = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "delete"]}]
    assert ("", "pods", "delete") in expand(extra) and ("", "pods", "delete") not in CONTROLLER_API_CALLS
    with pytest.raises(AssertionError, match="wildcard"):
        expand([{"apiGroups": ["ray.io"], "resources": ["*"], "verbs": ["get"]}])
