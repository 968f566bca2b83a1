"""Async client for the kubelet PodResources v1 ``List`` call over its unix socket.

The kubelet serves ``v1.PodResourcesLister`` on ``/var/lib/kubelet/pod-resources/kubelet.sock``.
The DaemonSet mounts the *directory*, so a kubelet restart (which recreates the socket) is seen
here: after any failed call the channel is dropped and the next call dials afresh, instead of
waiting out gRPC's reconnect backoff on a dead socket.  A socket that does not exist (yet) is
not an error of the exporter: :class:`PodResourcesUnavailable` with ``kind="socket_absent"``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import grpc
import grpc.aio

from exporter.podresources import api_pb2, api_pb2_grpc
from exporter.sample import PodRef

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


class PodResourcesUnavailable(RuntimeError):
    """The List call could not be made; ``kind`` is a bounded label (socket_absent, rpc_error)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Allocations:
    """GPU devices allocated to containers, keyed by normalized device id.

    Keys are ``GPU-<uuid>`` / ``MIG-<uuid>`` (device-plugin ``uuid`` strategy), or ``index:<N>``
    for the ``index`` strategy and GKE's ``nvidiaN`` form.
    """

    by_device: Mapping[str, PodRef]

    def for_gpu(self, uuid: str, index: int) -> PodRef | None:
        return self.by_device.get(uuid) or self.by_device.get(f"index:{index}")


NO_ALLOCATIONS = Allocations(MappingProxyType({}))


def is_gpu_resource(resource_name: str) -> bool:
    return resource_name == GPU_RESOURCE or resource_name.startswith(MIG_RESOURCE_PREFIX)


def normalize_device_id(device_id: str) -> str | None:
    """``GPU-x::3`` -> ``GPU-x``; ``MIG-y`` -> ``MIG-y``; ``"2"`` / ``nvidia2`` -> ``index:2``; else None."""
    base = device_id.split("::", 1)[0].strip()
    if base.startswith(("GPU-", "MIG-")):
        return base
    if base.isdigit():
        return f"index:{int(base)}"
    if base.startswith("nvidia") and base[6:].isdigit():  # GKE "nvidia0" (MIG "nvidia0/gi1" is not mapped)
        return f"index:{int(base[6:])}"
    return None


def allocations_from_response(resp: api_pb2.ListPodResourcesResponse) -> Allocations:
    """Pure: keep containers holding ``nvidia.com/gpu`` or ``nvidia.com/mig-*`` devices.

    One device maps to one container; with time-slicing replicas (``GPU-x::N``) the last pod
    listed wins, as in dcgm-exporter without ``KUBERNETES_VIRTUAL_GPUS``.
    """
    out: dict[str, PodRef] = {}
    for pod in resp.pod_resources:
        for container in pod.containers:
            for dev in container.devices:
                if not is_gpu_resource(dev.resource_name):
                    continue
                for device_id in dev.device_ids:
                    key = normalize_device_id(device_id)
                    if key is not None:
                        out[key] = PodRef(namespace=pod.namespace, pod=pod.name, container=container.name)
    return Allocations(MappingProxyType(out))


def _exists(path: str) -> bool:
    return os.path.exists(path)


class PodResourcesClient:
    """``List`` with a timeout; reconnects after failures; never raises anything but PodResourcesUnavailable."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout: float = 5.0) -> None:
        self.socket_path = os.path.abspath(socket_path)
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None

    async def list_allocations(self) -> Allocations:
        if not _exists(self.socket_path):  # a stat on a local path: cheap, fine on the loop
            await self._drop()
            raise PodResourcesUnavailable("socket_absent", f"no kubelet PodResources socket at {self.socket_path}")
        fresh = self._stub is None
        try:
            return await self._list()
        except grpc.aio.AioRpcError as e:
            await self._drop()
            if fresh or e.code() != grpc.StatusCode.UNAVAILABLE:
                raise self._unavailable(e) from e
        try:  # the channel may predate a kubelet restart: dial the new socket once more, now
            return await self._list()
        except grpc.aio.AioRpcError as e:
            await self._drop()
            raise self._unavailable(e) from e

    async def _list(self) -> Allocations:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(f"unix://{self.socket_path}")
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        resp = await self._stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        return allocations_from_response(resp)

    def _unavailable(self, e: grpc.aio.AioRpcError) -> PodResourcesUnavailable:
        return PodResourcesUnavailable(
            "rpc_error", f"PodResources List on {self.socket_path} failed: {e.code().name}: {e.details()}"
        )

    async def _drop(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        await self._drop()
