"""The command line as a real subprocess: flags and environment, /metrics, SIGTERM, no NVML."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import aiohttp
import pytest

from exporter.cli import build_parser, main
from exporter.sources.sim import SimSource
from tests.exporter.expo import by_gpu
from tests.exporter.kubelet import KubeletServer, pod
from tests.support.paths import REPO
from tests.support.ports import free_port


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEPILOT_") and k not in ("NODE_NAME", "LD_LIBRARY_PATH")}
    e.update(extra)
    return e


async def fetch(url: str) -> str:
    """GET ``url`` once the subprocess listens (up to 20 s)."""
    async with asyncio.timeout(20), aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url) as r:
                    if r.status == 200:
                        return await r.text()
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)


async def test_cli_serves_dcgm_names_with_pod_labels_and_stops_on_sigterm(kubelet: KubeletServer) -> None:
    uuids = SimSource("node-cli", gpus=6).uuids  # the subprocess builds the same seeded fleet
    kubelet.servicer.pods = [pod("cli-pod", "team-z", "main", "nvidia.com/gpu", uuids[5])]
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "exporter", "--source", "sim", "--listen", f"127.0.0.1:{port}", "--interval", "0.5",
        cwd=REPO,
        env=env(NODE_NAME="node-cli", QUEUEPILOT_SIM_GPUS="6", QUEUEPILOT_POD_RESOURCES_SOCKET=str(kubelet.socket_path)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        text = await fetch(f"http://127.0.0.1:{port}/metrics")
        gpus = by_gpu(text, "DCGM_FI_DEV_GPU_UTIL")
        assert len(gpus) == 6 and {g["Hostname"] for g in gpus.values()} == {"node-cli"}
        assert (gpus["5"]["namespace"], gpus["5"]["pod"], gpus["5"]["container"]) == ("team-z", "cli-pod", "main")
        assert all("pod" not in gpus[i] for i in "01234")  # the kubelet's allocations are authoritative
        assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
        assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 15)
    stderr = (await proc.stderr.read()).decode()
    assert rc == 0, stderr
    assert f"serving http://127.0.0.1:{port}/metrics" in stderr
    assert "shutting down" in stderr and "Traceback" not in stderr


async def test_nvml_without_a_gpu_library_exits_non_zero_with_one_line() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "exporter", "--source", "nvml", "--listen", "127.0.0.1:0",
        "--pod-resources-socket", "", cwd=REPO, env=env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 1
    assert len(lines) == 1 and lines[0].startswith("queuepilot exporter: --source nvml:"), lines
    assert "NVML" in lines[0]


async def test_bad_flags_exit_2() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "exporter", "--source", "sim", "--listen", "nonsense", cwd=REPO, env=env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2 and b"argument --listen: listen address must be HOST:PORT" in err


def test_every_flag_has_its_environment_variable(monkeypatch) -> None:
    monkeypatch.setenv("QUEUEPILOT_SOURCE", "dcgm")
    monkeypatch.setenv("QUEUEPILOT_LISTEN", "127.0.0.1:9999")
    monkeypatch.setenv("QUEUEPILOT_INTERVAL", "2.5")
    monkeypatch.setenv("NODE_NAME", "node-env")
    monkeypatch.setenv("QUEUEPILOT_DCGM_URL", "http://dcgm:9400/metrics")
    monkeypatch.setenv("QUEUEPILOT_DCGM_TIMEOUT", "3")
    monkeypatch.setenv("QUEUEPILOT_POD_RESOURCES_SOCKET", "")
    monkeypatch.setenv("QUEUEPILOT_DRAIN_XIDS", "79, 48")
    monkeypatch.setenv("QUEUEPILOT_FATAL_XID_WINDOW", "120")
    monkeypatch.setenv("QUEUEPILOT_THERMAL_WINDOW", "30")
    monkeypatch.setenv("QUEUEPILOT_SIM_GPUS", "3")
    monkeypatch.setenv("QUEUEPILOT_SIM_MODEL", "NVIDIA L4")
    monkeypatch.setenv("QUEUEPILOT_SIM_SEED", "9")
    monkeypatch.setenv("QUEUEPILOT_MAX_CONNECTIONS", "7")
    monkeypatch.setenv("QUEUEPILOT_SIM_MIG_GPUS", "2")
    monkeypatch.setenv("QUEUEPILOT_GPM", "off")
    monkeypatch.setenv("QUEUEPILOT_LOG_LEVEL", "debug")
    args = vars(build_parser().parse_args([]))
    assert args == {
        "source": "dcgm", "listen": ("127.0.0.1", 9999), "interval": 2.5, "node_name": "node-env",
        "dcgm_url": "http://dcgm:9400/metrics", "dcgm_timeout": 3.0, "pod_resources_socket": "",
        "drain_xids": frozenset({79, 48}), "fatal_xid_window": 120.0, "thermal_window": 30.0, "sim_gpus": 3,
        "sim_model": "NVIDIA L4", "sim_seed": 9, "max_connections": 7, "log_level": "DEBUG",
        "sim_mig_gpus": 2, "gpm": "off",
    }
    assert vars(build_parser().parse_args(["--source", "sim", "--interval", "1"]))["source"] == "sim"  # flags win


def test_a_bad_environment_value_is_a_usage_error(monkeypatch, capsys) -> None:
    monkeypatch.setenv("QUEUEPILOT_SOURCE", "cuda")
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2 and "QUEUEPILOT_SOURCE='cuda': choose from nvml, dcgm, sim" in capsys.readouterr().err


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("QUEUEPILOT_INTERVAL", "0", "must be > 0 seconds"),
    ("QUEUEPILOT_INTERVAL", "inf", "must be a finite number"),
    ("QUEUEPILOT_SIM_GPUS", "-1", "must be >= 0"),
    ("QUEUEPILOT_MAX_CONNECTIONS", "0", "must be >= 1"),
    ("QUEUEPILOT_LISTEN", "::1:80", "put an IPv6 address in brackets"),
])
def test_bad_durations_counts_and_addresses_from_the_environment(monkeypatch, capsys, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as e:
        main([])
    err = capsys.readouterr().err
    assert e.value.code == 2 and variable in err and message in err and "Traceback" not in err


def test_help_shows_every_default_and_variable(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser({}).parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0
    for text in ("[env QUEUEPILOT_SOURCE] (default: nvml)", "(default: 0.0.0.0:9400)", "(default: 10.0)",
                 "[env NODE_NAME, QUEUEPILOT_NODE_NAME]", "[env QUEUEPILOT_MAX_CONNECTIONS] (default: 128)"):
        assert text in out


def test_sim_mig_gpus_more_than_sim_gpus_is_one_line_and_exit_2(capsys) -> None:
    from exporter.cli import main

    assert main(["--source", "sim", "--sim-gpus", "2", "--sim-mig-gpus", "3", "--listen", "127.0.0.1:0"]) != 0
    err = capsys.readouterr().err
    assert "--sim-mig-gpus 3 is more than --sim-gpus 2" in err and "Traceback" not in err


def test_sim_mig_gpus_reach_the_sim_source() -> None:
    from exporter.cli import build_parser, make_source

    src = make_source(build_parser({}).parse_args(["--source", "sim", "--sim-gpus", "4", "--sim-mig-gpus", "1"]))
    assert len(src.mig_uuids) == 1
