"""Pod attribution: put the kubelet's allocations onto a sample (pure; the I/O is in
:mod:`exporter.podresources.client`).

When the PodResources ``List`` succeeded it is authoritative: a GPU (or MIG instance) whose
device id is not listed gets no pod, so a departed pod's labels vanish from the next render.
When attribution is skipped (socket absent, kubelet down) the source's own pods are kept (the
``sim`` source's simulated pods, a co-located dcgm-exporter's pod labels; none for ``nvml``).
"""

from __future__ import annotations

from dataclasses import replace

from exporter.podresources.client import Allocations
from exporter.sample import FleetSample, GpuSample


def attribute_gpu(gpu: GpuSample, allocations: Allocations) -> GpuSample:
    mig = tuple(replace(m, pod=allocations.by_device.get(m.uuid)) for m in gpu.mig)
    return replace(gpu, pod=allocations.for_gpu(gpu.uuid, gpu.index), mig=mig)


def attribute(sample: FleetSample, allocations: Allocations) -> FleetSample:
    """A new sample whose GPUs carry exactly the pods in ``allocations``."""
    return replace(sample, gpus=tuple(attribute_gpu(g, allocations) for g in sample.gpus))
