"""The PromQL of GPU economics, written once for the two places that evaluate it: the recording rules
(``alerts/economics.py``, evaluated by Prometheus every interval) and ``queuepilot report``, which
evaluates the same expressions over the raw series where the rules did not run (a Prometheus that has
months of dcgm-exporter history from before queuepilot was installed, or none of the rules loaded).

Per GPU held by a pod queuepilot knows: how busy it is (0-1: ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` where the
GPU reports it, else ``DCGM_FI_DEV_GPU_UTIL`` / 100) and whether it is active (busy above a threshold, or
framebuffer in use), each carrying the ``queuepilot_pod_info`` labels that attribute it to a team, a queue
and a Ray worker group.  The metric names are dcgm-exporter's (the exporter's catalog keeps them; a test
checks these against it) and the controller's ``queuepilot_pod_info``.
"""

from __future__ import annotations

from collections.abc import Iterable

POD_INFO = "queuepilot_pod_info"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
RAW_INPUTS = (POD_INFO, ENGINE_ACTIVE, GPU_UTIL, FB_USED)
INFO_LABELS = ("raycluster", "group", "local_queue", "cluster_queue", "flavor", "job_kind")
GPU_LABELS = ("Hostname", "gpu", "modelName", "namespace", "pod")
ACTIVE_UTILIZATION = 0.01  # engine busy ratio above which a GPU counts as active
ACTIVE_MEMORY_MIB = 128.0  # framebuffer MiB in use above which a GPU counts as active


def by(labels: Iterable[str]) -> str:
    return ", ".join(labels)


def number(value: float | str) -> str:
    """A number for PromQL without a trailing .0 (3600.0 -> 3600); a chart token as it is."""
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _normalize(expr: str) -> str:
    """Pod labels as ``pod``/``namespace`` whether the exporter's arrive so (honorLabels) or as
    ``exported_pod``/``exported_namespace`` (Prometheus-operator default)."""
    return (
        f'label_replace(label_replace({expr}, "pod", "$1", "exported_pod", "(.+)"), '
        f'"namespace", "$1", "exported_namespace", "(.+)")'
    )


def _per_gpu(metric: str) -> str:
    return f"max by ({by(GPU_LABELS)}) ({_normalize(metric)})"


def busy_per_gpu() -> str:
    """Busy ratio per GPU with pod labels: the profiling engine-active ratio where the GPU has it, else
    utilization percent / 100."""
    return f"clamp({_per_gpu(ENGINE_ACTIVE)} or on (Hostname, gpu) {_per_gpu(GPU_UTIL)} / 100, 0, 1)"


def active_per_gpu(active_utilization: float | str = ACTIVE_UTILIZATION,
                   active_memory_mib: float | str = ACTIVE_MEMORY_MIB) -> str:
    """1 per GPU that is busy above ``active_utilization`` or holds more than ``active_memory_mib`` of
    framebuffer, else 0."""
    fb = _per_gpu(FB_USED)
    return (
        f"max by ({by(GPU_LABELS)}) ("
        f'label_replace(({busy_per_gpu()}) >= bool {number(active_utilization)}, "signal", "busy", "", "") '
        f'or label_replace({fb} >= bool {number(active_memory_mib)}, "signal", "framebuffer", "", ""))'
    )


def attributed(expr: str, info_selector: str = "") -> str:
    """``expr`` (per GPU, with ``namespace``/``pod``) joined to ``queuepilot_pod_info`` (two controller
    replicas export it: ``max`` keeps one); ``info_selector`` (``{namespace="x"}``) narrows the pods."""
    info = f"max by ({by(('namespace', 'pod', *INFO_LABELS))}) ({POD_INFO}{info_selector})"
    return f"({expr}) * on (namespace, pod) group_left ({by(INFO_LABELS)}) {info}"
