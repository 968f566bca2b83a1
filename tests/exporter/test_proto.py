"""The minimal PodResources proto: upstream names and numbers, stubs up to date, upstream extras ignored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from exporter.podresources import api_pb2

GENERATED = ("exporter/podresources/api_pb2.py", "exporter/podresources/api_pb2_grpc.py")


def fields(message) -> dict[str, tuple[int, int]]:
    return {f.name: (f.number, f.type) for f in message.DESCRIPTOR.fields}


def test_field_names_numbers_and_types_are_upstreams() -> None:
    string, message = 9, 11  # FieldDescriptor.TYPE_STRING, TYPE_MESSAGE
    assert api_pb2.DESCRIPTOR.package == "v1"
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister" and "List" in service.methods_by_name
    assert fields(api_pb2.ListPodResourcesResponse) == {"pod_resources": (1, message)}
    assert fields(api_pb2.PodResources) == {"name": (1, string), "namespace": (2, string), "containers": (3, message)}
    assert fields(api_pb2.ContainerResources) == {"name": (1, string), "devices": (2, message)}
    assert fields(api_pb2.ContainerDevices) == {"resource_name": (1, string), "device_ids": (2, string)}


def test_fields_only_upstream_has_are_skipped() -> None:
    c = api_pb2.ContainerResources(
        name="worker", devices=[api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-a"])]
    )
    # upstream's ContainerResources.cpu_ids = 3 (packed int64: 2, 3) and ContainerDevices.topology = 3
    wire = c.SerializeToString() + bytes([0x1A, 0x02, 0x02, 0x03])
    parsed = api_pb2.ContainerResources.FromString(wire)
    assert parsed.name == "worker" and list(parsed.devices[0].device_ids) == ["GPU-a"]


def test_generated_stubs_match_make_proto(tmp_path: Path, repo_root: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
         "exporter/podresources/api.proto"],
        cwd=repo_root, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    for name in GENERATED:
        assert (tmp_path / name).read_text() == (repo_root / name).read_text(), f"{name} is stale: run make proto"
