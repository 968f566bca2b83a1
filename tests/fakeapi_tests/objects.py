"""Real-looking Kueue and KubeRay objects for the fake API server's own tests."""

from __future__ import annotations

from typing import Any

KUEUE = "kueue.x-k8s.io"
KUEUE_V = "v1beta2"


def workload(
    name: str, namespace: str = "team-a", gpus: int = 8, queue: str = "team-a-queue"
) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE}/{KUEUE_V}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "queueName": queue,
            "active": True,
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": "ghcr.io/example/trainer:1.0",
                                    "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "8"}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


def check_state(
    name: str, state: str, message: str = "", when: str = "2026-08-22T10:00:00Z"
) -> dict[str, Any]:
    return {"name": name, "state": state, "message": message, "lastTransitionTime": when}


def raycluster(name: str, namespace: str = "team-a", replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"queuepilot.io/autoscale": "true"},
        },
        "spec": {
            "rayVersion": "2.40.0",
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-head",
                                "image": "rayproject/ray:2.40.0",
                                "ports": [{"containerPort": 8265, "name": "dashboard"}],
                            }
                        ]
                    }
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu-workers",
                    "replicas": replicas,
                    "minReplicas": 0,
                    "maxReplicas": 8,
                    "rayStartParams": {},
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "ray-worker",
                                    "image": "rayproject/ray:2.40.0",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }


def pod(
    name: str,
    namespace: str = "team-a",
    node: str | None = None,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": phase},
    }
    if node:
        obj["spec"]["nodeName"] = node
    return obj


def node(name: str, gpus: int = 8, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)}, "allocatable": {"nvidia.com/gpu": str(gpus)}},
    }
