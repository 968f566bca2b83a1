"""The chart's controller RBAC grants exactly autoscaler/rbac.py CONTROLLER_API_CALLS, both ways."""

from __future__ import annotations

import pytest

from autoscaler.rbac import CONTROLLER_API_CALLS, NAMED_SECRET_CALLS
from tests.chart.combos import COMBOS
from tests.chart.helm import CHART, HELMS, MAPPING, NAMESPACE, RELEASE, render, run_helm

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


SECRETS = ("controller.rayTokenSecrets={team-a/ray-token,team-b/ray-token,team-a/ray-token-v2}",)


def _role_key(d) -> tuple[str, str, str]:
    return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]


def bindings(docs, service_account: str):
    """(binding, role) pairs that bind a role to the service account."""
    roles = {_role_key(d): d for d in docs if d["kind"] in ("ClusterRole", "Role")}
    for b in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == service_account and s["namespace"] == NAMESPACE
                   for s in b["subjects"]):
            continue
        ns = b["metadata"].get("namespace", "") if b["roleRef"]["kind"] == "Role" else ""
        yield b, roles[(b["roleRef"]["kind"], ns, b["roleRef"]["name"])]


def granted(docs, service_account: str) -> tuple[set[Triple], set[Triple]]:
    """(cluster-wide, release-namespace-only) triples bound to the service account; Roles in other
    namespaces are allowed only for the named Secrets (see :func:`secret_grants`)."""
    cluster: set[Triple] = set()
    namespaced: set[Triple] = set()
    for b, role in bindings(docs, service_account):
        triples = expand(role["rules"])
        if b["kind"] == "ClusterRoleBinding":
            cluster |= triples
        elif b["metadata"]["namespace"] == NAMESPACE:
            assert role["metadata"]["namespace"] == NAMESPACE
            namespaced |= triples
        else:
            assert triples == NAMED_SECRET_CALLS, f"a tenant namespace gets more than named Secrets: {role}"
            namespaced |= triples
    return cluster, namespaced


def secret_grants(docs, service_account: str) -> dict[str, set[str]]:
    """namespace -> the Secret names the service account may get there; every rule must name them."""
    out: dict[str, set[str]] = {}
    for _, role in bindings(docs, service_account):
        for rule in role["rules"]:
            if "secrets" in rule["resources"]:
                assert rule["resources"] == ["secrets"] and rule["verbs"] == ["get"], rule
                assert rule.get("resourceNames"), f"Secrets granted without resourceNames: {rule}"
                out.setdefault(role["metadata"]["namespace"], set()).update(rule["resourceNames"])
    return out


def controller_sa(docs) -> str:
    dep = next(d for d in docs if d["kind"] == "Deployment")
    return dep["spec"]["template"]["spec"]["serviceAccountName"]


@pytest.mark.parametrize("helm", HELMS)
def test_controller_rbac_is_exactly_the_code_api_calls(helm: str) -> None:
    docs = render(helm, (*MAPPING, *SECRETS)).docs
    cluster, namespaced = granted(docs, controller_sa(docs))
    total = cluster | namespaced
    assert not total - CONTROLLER_API_CALLS, f"granted but never called: {sorted(total - CONTROLLER_API_CALLS)}"
    assert not CONTROLLER_API_CALLS - total, f"called but not granted: {sorted(CONTROLLER_API_CALLS - total)}"
    # the Lease and the owner memory's ConfigMap are only needed in the release namespace
    assert {t for t in total if t[1] in ("leases", "secrets", "configmaps")} == namespaced
    assert not {t for t in cluster if t[1] in ("leases", "secrets", "configmaps")}


@pytest.mark.parametrize("helm", HELMS)
def test_ray_token_secrets_are_granted_by_name_in_their_own_namespace(helm: str) -> None:
    docs = render(helm, SECRETS).docs
    assert secret_grants(docs, controller_sa(docs)) == {
        "team-a": {"ray-token", "ray-token-v2"}, "team-b": {"ray-token"}}
    # without the list: no Secret at all, anywhere
    plain = render(helm).docs
    cluster, namespaced = granted(plain, controller_sa(plain))
    assert secret_grants(plain, controller_sa(plain)) == {}
    assert (cluster | namespaced) == CONTROLLER_API_CALLS - NAMED_SECRET_CALLS


@pytest.mark.parametrize("entry", ["team-a", "team-a/ray/token", "Team-A/token", "/token"])
def test_a_malformed_secret_entry_fails_the_render(entry: str) -> None:
    proc = run_helm("helm3", "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    "--set", f"controller.rayTokenSecrets={{{entry}}}")
    # refused by the schema's pattern or, failing that, by the template itself
    assert proc.returncode != 0 and ("expected namespace/secretName" in proc.stderr
                                     or "rayTokenSecrets" in proc.stderr), proc.stderr


@pytest.mark.parametrize("helm", HELMS)
def test_lease_get_update_limited_to_our_lease(helm: str) -> None:
    docs = render(helm).docs
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    lease = next(a.split("=", 1)[1] for a in args if a.startswith("--lease-name="))
    rules = [r for d in docs if d["kind"] == "Role" for r in d["rules"] if "leases" in r["resources"]]
    assert rules
    for rule in rules:
        if set(rule["verbs"]) & {"get", "update"}:
            assert rule["resourceNames"] == [lease]


@pytest.mark.parametrize("helm", HELMS)
def test_the_owner_memory_configmap_is_the_only_one_read_or_written(helm: str) -> None:
    docs = render(helm).docs
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    name = next(a.split("=", 1)[1] for a in args if a.startswith("--stall-owners-configmap="))
    lease = next(a.split("=", 1)[1] for a in args if a.startswith("--lease-name="))
    assert name == f"{lease}-stall-owners"  # both named after the release's controller
    rules = [r for d in docs if d["kind"] == "Role" for r in d["rules"] if "configmaps" in r["resources"]]
    assert {v for r in rules for v in r["verbs"]} == {"create", "get", "patch"}
    for rule in rules:
        if set(rule["verbs"]) & {"get", "patch"}:
            assert rule["resourceNames"] == [name]


@pytest.mark.parametrize("helm", HELMS)
def test_without_leader_election_no_lease_rights(helm: str) -> None:
    docs = render(helm, COMBOS["scrape-live-no-leader"].sets).docs
    cluster, namespaced = granted(docs, controller_sa(docs))
    assert namespaced == {t for t in CONTROLLER_API_CALLS if t[1] == "configmaps"}  # the owner memory only
    assert cluster == {t for t in CONTROLLER_API_CALLS if t[1] not in ("leases", "secrets", "configmaps")}


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
