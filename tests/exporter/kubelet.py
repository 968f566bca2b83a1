"""A fake kubelet for the exporter tests: a real gRPC PodResources server (``KubeletServer``) on a unix
socket, answering with the pods the test sets (``FakeKubelet``, ``pod``)."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
import grpc.aio

from exporter.podresources import api_pb2, api_pb2_grpc


def pod(name: str, namespace: str, container: str, resource: str, *device_ids: str) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            api_pb2.ContainerResources(
                name=container,
                devices=[api_pb2.ContainerDevices(resource_name=resource, device_ids=list(device_ids))],
            )
        ],
    )


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """Answers ``List`` with ``self.pods``; ``fail`` makes it answer UNAVAILABLE."""

    def __init__(self) -> None:
        self.pods: list[api_pb2.PodResources] = []
        self.fail = False
        self.calls = 0

    async def List(self, request, context):
        self.calls += 1
        if self.fail:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is restarting")
        return api_pb2.ListPodResourcesResponse(pod_resources=self.pods)


class KubeletServer:
    """Starts / stops a real grpc.aio server for a FakeKubelet on ``socket_path``."""

    def __init__(self, socket_path: Path, servicer: FakeKubelet) -> None:
        self.socket_path = socket_path
        self.servicer = servicer
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server()
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self.servicer, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self, leave_stale_socket: bool = False) -> None:
        """Stop serving. ``leave_stale_socket``: a dead socket file stays, as after a kubelet crash."""
        if self._server is not None:
            await self._server.stop(None)
            self._server = None
        self.socket_path.unlink(missing_ok=True)
        if leave_stale_socket:
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(str(self.socket_path))
