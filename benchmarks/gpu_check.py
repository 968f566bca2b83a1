"""Check the nvml source on a real Hopper (or newer) GPU node: NVML latency and GPM under a known load.

Run on a GPU node from the repository root (a few minutes)::

    .venv/bin/python benchmarks/gpu_check.py [--gpu 0] [--phase-seconds 20] [--interval 5]

It writes, under ``benchmarks/results/``:

- ``nvml-latency-real.md``: ``benchmarks/nvml_latency.py`` against the real driver (per-call p50/p99,
  a whole collection with GPM, per GPU);
- ``gpm-check-real.md``: the exporter's own ``NvmlSource`` collecting every ``--interval`` seconds
  while GPU ``--gpu`` is idle, then runs a bf16 matrix-multiply loop (tensor cores), then a large
  copy loop (memory-bound), then idle again; per phase the mean of ``DCGM_FI_DEV_GPU_UTIL``,
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, ``SM_ACTIVE``, ``SM_OCCUPANCY``, ``PIPE_TENSOR_ACTIVE``,
  ``PIPE_TENSOR_HMMA_ACTIVE``, ``DRAM_ACTIVE``, ``PCIE_RX_BYTES``, with what is expected of each
  phase and whether it held, and the MIG instances' GPM fields when MIG is on.

The load comes from torch (CUDA) if it is installed, else cupy; without either, ``nvidia-smi`` (if
present) is recorded instead and the load phases are skipped.  The expectations are reported,
never asserted: the point is to see engine, tensor and DRAM activity move as the docs say.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exporter.sources.nvml import NvmlSource  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
ERRORS: Counter[str] = Counter()  # the source's error kinds over the whole check (no_permission: see docs)
FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU_UTIL %"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "engine"),
    ("DCGM_FI_PROF_SM_ACTIVE", "SM active"),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "occupancy"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor"),
    ("DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", "HMMA"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "DRAM"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "PCIe RX B/s"),
)

# the load, run in a child process so the sampler's timing is its own
TORCH_LOAD = """
import sys, time, torch
kind, seconds, gpu = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
dev = torch.device("cuda", gpu)
end = time.time() + seconds
if kind == "matmul":
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    while time.time() < end:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize(dev)
else:
    x = torch.empty(1 << 30, device=dev, dtype=torch.uint8)
    y = torch.empty(1 << 30, device=dev, dtype=torch.uint8)
    while time.time() < end:
        for _ in range(20):
            y.copy_(x)
        torch.cuda.synchronize(dev)
"""
CUPY_LOAD = """
import sys, time, cupy as cp
kind, seconds, gpu = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
cp.cuda.Device(gpu).use()
end = time.time() + seconds
if kind == "matmul":
    a = cp.random.rand(8192, 8192, dtype=cp.float32).astype(cp.float16)
    b = cp.random.rand(8192, 8192, dtype=cp.float32).astype(cp.float16)
    while time.time() < end:
        for _ in range(20):
            a @ b
        cp.cuda.Device(gpu).synchronize()
else:
    x = cp.empty(1 << 30, dtype=cp.uint8)
    y = cp.empty(1 << 30, dtype=cp.uint8)
    while time.time() < end:
        for _ in range(20):
            y[...] = x
        cp.cuda.Device(gpu).synchronize()
"""
# phase -> (field, op, bound) expectations
EXPECT = {
    "idle": (("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "<", 0.05), ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "<", 0.02)),
    "matmul (bf16)": (
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", ">", 0.8),
        ("DCGM_FI_PROF_SM_ACTIVE", ">", 0.6),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", ">", 0.3),
    ),
    "copy (memory-bound)": (
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", ">", 0.8),
        ("DCGM_FI_PROF_DRAM_ACTIVE", ">", 0.5),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "<", 0.05),
    ),
}


def load_program() -> tuple[str, str] | None:
    if importlib.util.find_spec("torch") is not None:
        return "torch", TORCH_LOAD
    if importlib.util.find_spec("cupy") is not None:
        return "cupy", CUPY_LOAD
    return None


async def run_phase(
    source: NvmlSource, name: str, seconds: float, interval: float, gpu: int, load: tuple[str, str] | None, kind: str
) -> tuple[str, list[dict[str, float]], list[list[tuple[int, str, dict[str, float]]]]]:
    proc = None
    if load is not None and kind:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", load[1], kind, str(seconds + interval), str(gpu))
        await asyncio.sleep(min(3.0, interval))  # let the kernels start
    rows: list[dict[str, float]] = []
    migs: list[list[tuple[int, str, dict[str, float]]]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(interval)
        sample = await source.collect(time.time())
        ERRORS.update(sample.errors)
        g = sample.gpus[gpu]
        rows.append(dict(g.fields))
        migs.append([(m.gpu_instance_id, m.profile, dict(m.fields)) for m in g.mig])
    if proc is not None:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
    return name, rows, migs


def mean(rows: list[dict[str, float]], field: str) -> float | None:
    values = [r[field] for r in rows if field in r]
    return statistics.mean(values) if values else None


async def gpm_check(args: argparse.Namespace) -> str:
    load = load_program()
    source = NvmlSource(platform.node())
    await source.start()
    phases = []
    try:
        ERRORS.update((await source.collect(time.time())).errors)  # the first interval starts here
        phases.append(await run_phase(source, "idle", args.phase_seconds, args.interval, args.gpu, None, ""))
        if load is not None:
            phases.append(await run_phase(source, "matmul (bf16)", args.phase_seconds, args.interval, args.gpu, load, "matmul"))
            phases.append(await run_phase(source, "copy (memory-bound)", args.phase_seconds, args.interval, args.gpu, load, "copy"))
            phases.append(await run_phase(source, "idle", args.phase_seconds, args.interval, args.gpu, None, ""))
        model = (await source.collect(time.time())).gpus[args.gpu].model_name
    finally:
        await source.close()

    lines = [
        "# GPM check on a real GPU",
        "",
        f"Command: `.venv/bin/python benchmarks/gpu_check.py {' '.join(sys.argv[1:])}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, host {platform.node()}, GPU {args.gpu}: {model}, driver "
        f"{source.driver_version}; load from {load[0] if load else 'nothing (neither torch nor cupy installed)'}; "
        f"{args.phase_seconds:g} s per phase, a collection every {args.interval:g} s (each value is the mean over "
        "the interval between two collections).",
        "",
        "| phase | " + " | ".join(label for _, label in FIELDS) + " | expected | held |",
        "|---|" + "---:|" * len(FIELDS) + "---|---|",
    ]
    for name, rows, _ in phases:
        cells = []
        for field, _ in FIELDS:
            v = mean(rows, field)
            cells.append("–" if v is None else (f"{v:.3g}" if field.endswith("BYTES") else f"{v:.3f}"))
        checks = EXPECT.get(name, ())
        held = []
        for field, op, bound in checks:
            v = mean(rows, field)
            ok = v is not None and (v > bound if op == ">" else v < bound)
            held.append("yes" if ok else "NO")
        expected = "; ".join(f"{f.removeprefix('DCGM_FI_PROF_')} {op} {b}" for f, op, b in checks)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {expected} | {', '.join(held)} |")
    errors = ", ".join(f"{k} x{n}" for k, n in sorted(ERRORS.items())) or "none"
    lines += ["", f"Errors the source counted during the check: {errors}."]
    mig_rows = [(name, m) for name, _, migs in phases for m in (migs[-1] if migs else [])]
    if mig_rows:
        lines += ["", "MIG instances (last collection of each phase):", "",
                  "| phase | GPU_I_ID | profile | engine | SM active | tensor | DRAM |", "|---|---:|---|---:|---:|---:|---:|"]
        for name, (gi, profile, f) in mig_rows:
            vals = [f.get(k) for k in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
                                       "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE")]
            lines.append(f"| {name} | {gi} | {profile} | " + " | ".join("–" if v is None else f"{v:.3f}" for v in vals) + " |")
    smi = shutil.which("nvidia-smi")
    if smi:
        query = "--query-gpu=index,name,driver_version,utilization.gpu,memory.used,mig.mode.current"
        out = await asyncio.to_thread(
            subprocess.run, [smi, query, "--format=csv"], capture_output=True, text=True, timeout=60
        )
        lines += ["", "nvidia-smi at the end:", "", "```", (out.stdout or out.stderr).strip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", type=int, default=0, help="the GPU (NVML index) to load and watch")
    p.add_argument("--phase-seconds", type=float, default=20.0)
    p.add_argument("--interval", type=float, default=5.0, help="seconds between collections")
    p.add_argument("--rounds", type=int, default=500, help="rounds of benchmarks/nvml_latency.py")
    p.add_argument("--library", help="a libnvidia-ml.so.1 to load instead of the driver's (a dry run)")
    p.add_argument("--results", type=Path, default=RESULTS, help="directory for the two reports")
    args = p.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    extra = []
    if args.library:
        import ctypes

        import pynvml

        pynvml.nvmlLib = ctypes.CDLL(args.library)
        extra = ["--library", args.library]
    latency = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "nvml_latency.py"), "--rounds", str(args.rounds),
         "--out", str(args.results / "nvml-latency-real.md"), *extra],
        cwd=REPO,
    )
    if latency.returncode != 0:
        print("nvml_latency.py failed (no NVIDIA driver here?)", file=sys.stderr)
    report = asyncio.run(gpm_check(args))
    (args.results / "gpm-check-real.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
