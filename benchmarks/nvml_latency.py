"""Per-call latency of every NVML call the ``nvml`` source makes, p50/p99 over N rounds, as markdown.

Against the real driver (a GPU node; pynvml finds ``libnvidia-ml.so.1`` itself)::

    .venv/bin/python benchmarks/nvml_latency.py --rounds 2000 --out benchmarks/results/nvml-latency-real.md

Against the test suite's fake library (any machine with gcc; it is compiled into a temp dir)::

    .venv/bin/python benchmarks/nvml_latency.py --fake --gpus 8 --rounds 2000 \\
        --out benchmarks/results/nvml-latency-fake.md

or ``--library PATH`` for a given library file.  The per-cycle reads are the source's own table
(``exporter.sources.nvml_reads``), so the rows are exactly the calls a collection makes, with the
same fallbacks for symbols an older driver lacks; the GPM rows time the source's own GPM stream
(``exporter.sources.nvml_gpm``: one sample and one metrics call per device and MIG instance per
collection).  The last rows time one whole ``NvmlSource.collect`` (all GPUs with GPM, in its
worker thread; target: under 5 ms per GPU) and one non-blocking event poll.  Numbers are
reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pynvml  # noqa: E402  (benchmarks are outside the import-linter packages)

from exporter.sources.nvml import NvmlSource  # noqa: E402
from exporter.sources.nvml_gpm import GPM_FIELDS, GpmStream  # noqa: E402
from exporter.sources.nvml_reads import GPU_READS, MIG_READS, STATIC_SYMBOLS, Read  # noqa: E402

FAKE_SRC = REPO / "tests" / "nvml" / "fake_nvml.c"


def build_fake(gpus: int) -> tuple[Path, Path]:
    """Compile the fake NVML into a temp dir and write a control file for ``gpus`` GPUs."""
    d = Path(tempfile.mkdtemp(prefix="fake-nvml-"))
    lib = d / "libnvidia-ml.so.1"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O2",
            "-Wl,-soname,libnvidia-ml.so.1",
            "-o",
            str(lib),
            str(FAKE_SRC),
            "-lpthread",
        ],
        check=True,
    )
    control = d / "control"
    last = gpus - 1  # the last GPU in MIG mode with two instances, so the MIG path is timed too
    lines = [
        f"gpus {gpus}",
        f"gpu {last} mig_mode 1",
        f"mig {last} 0 1 1g.10gb MIG-bench-1 {10 << 30} {1 << 30}",
        f"mig {last} 1 2 1g.10gb MIG-bench-2 {10 << 30} {2 << 30}",
    ]
    for i in range(gpus):  # every GPU answers every GPM metric the source reads (a Hopper fleet)
        lines.append(f"gpu {i} gpm 1")
        for gi in (-1, 1, 2) if i == last else (-1,):
            lines += [f"gpm {i} {gi} {f.metric_id} {10.0 + f.metric_id}" for f in GPM_FIELDS]
    control.write_text("\n".join(lines) + "\n")
    return lib, control


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def time_call(
    fn: Callable[[], Any], samples: list[float], expected: tuple[type[Exception], ...] = ()
) -> None:
    """Time one call; an ``expected`` exception (e.g. the event wait's timeout) is a normal outcome."""
    t0 = time.perf_counter_ns()
    try:
        fn()
    except expected:
        pass
    samples.append((time.perf_counter_ns() - t0) / 1000.0)


def pick_alternative(read: Read, handles: list[Any]) -> tuple[int | None, str]:
    """The alternative the source would settle on for this read, or (None, why not) on every GPU."""
    why = "no GPU"
    for handle in handles:
        for i, call in enumerate(read.calls):
            try:
                call(pynvml, handle)
                return i, ""
            except pynvml.NVMLError_FunctionNotFound:
                why = "function not found"
                continue
            except pynvml.NVMLError as e:
                why = str(e)
                break
    return None, why


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--fake", action="store_true", help="compile and use tests/nvml/fake_nvml.c")
    src.add_argument("--library", help="path of a libnvidia-ml.so.1 to load instead of the loader's choice")
    p.add_argument("--gpus", type=int, default=8, help="GPUs the fake reports (with --fake)")
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--out", type=Path, help="markdown file to write (default: stdout)")
    args = p.parse_args(argv)

    library = "libnvidia-ml.so.1 (dynamic loader search)"
    if args.fake:
        lib, control = build_fake(args.gpus)
        os.environ["FAKE_NVML_CONTROL"] = str(control)
        pynvml.nvmlLib = ctypes.CDLL(str(lib))
        library = "fake (tests/nvml/fake_nvml.c, gcc -O2)"
    elif args.library:
        pynvml.nvmlLib = ctypes.CDLL(args.library)
        library = args.library

    t0 = time.perf_counter_ns()
    pynvml.nvmlInit()
    init_us = (time.perf_counter_ns() - t0) / 1000.0
    try:
        rows, header = measure(args.rounds)
        rows += asyncio.run(measure_collect(args.rounds))
    finally:
        pynvml.nvmlShutdown()

    cmd = " ".join(shlex.quote(a) for a in [".venv/bin/python", "benchmarks/nvml_latency.py", *sys.argv[1:]])
    lines = [
        "# NVML per-call latency of the nvml source",
        "",
        f"Command: `{cmd}`",
        "",
        f"- library: {library}; driver {header['driver']}; {header['gpus']} GPU(s): {header['names']}",
        f"- nvidia-ml-py {metadata.version('nvidia-ml-py')}, Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; {args.rounds} rounds; nvmlInit once: {init_us:.0f} µs",
        "- per-GPU rows: one sample per GPU per round (a GPU where the call is not supported gives none); "
        "times include pynvml's ctypes marshalling; with the fake they are Python + ctypes + a stat() of "
        "its control file, not a driver",
        "",
        "| call (C symbol) | DCGM fields | p50 µs | p99 µs | samples |",
        "|---|---|---:|---:|---:|",
    ]
    for name, fields, samples, note in rows:
        if samples:
            lines.append(
                f"| {name} | {fields} | {percentile(samples, 50):.2f} | {percentile(samples, 99):.2f} | {len(samples)} |"
            )
        else:
            lines.append(f"| {name} | {fields} | – | – | {note} |")
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text, end="")
    return 0


Row = tuple[str, str, list[float], str]


def measure(rounds: int) -> tuple[list[Row], dict[str, str]]:
    count = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    names = sorted({pynvml.nvmlDeviceGetName(h) for h in handles})
    header = {"driver": pynvml.nvmlSystemGetDriverVersion(), "gpus": str(count), "names": ", ".join(names)}
    rows: list[Row] = []

    static: dict[str, tuple[Callable[[Any], Any], bool]] = {
        "nvmlDeviceGetCount_v2": (lambda h: pynvml.nvmlDeviceGetCount(), False),
        "nvmlSystemGetDriverVersion": (lambda h: pynvml.nvmlSystemGetDriverVersion(), False),
        "nvmlDeviceGetHandleByIndex_v2": (lambda h: pynvml.nvmlDeviceGetHandleByIndex(0), False),
        "nvmlDeviceGetUUID": (pynvml.nvmlDeviceGetUUID, True),
        "nvmlDeviceGetName": (pynvml.nvmlDeviceGetName, True),
        "nvmlDeviceGetPciInfo_v3": (pynvml.nvmlDeviceGetPciInfo, True),
        "nvmlDeviceGetMigMode": (pynvml.nvmlDeviceGetMigMode, True),
    }
    assert set(static) == set(STATIC_SYMBOLS)
    for symbol, (fn, per_gpu) in static.items():
        samples: list[float] = []
        note = ""
        for _ in range(rounds):
            for h in handles if per_gpu else handles[:1]:
                try:
                    time_call(lambda fn=fn, h=h: fn(h), samples)
                except pynvml.NVMLError as e:  # e.g. MIG mode on a GPU without MIG
                    note = str(e)
        rows.append((f"{symbol} (static, once)", "labels", samples, note))

    for read in GPU_READS:
        chosen, why = pick_alternative(read, handles)
        if chosen is None:
            rows.append((" / ".join(read.symbols), ", ".join(read.fields), [], why))
            continue
        call = read.calls[chosen]
        samples = []
        for _ in range(rounds):
            for h in handles:
                try:
                    time_call(lambda call=call, h=h: call(pynvml, h), samples)
                except pynvml.NVMLError:
                    pass  # not supported on this GPU: the source skips it after once
        label = read.symbols[chosen] + (" (fallback)" if chosen else "")
        rows.append((label, ", ".join(read.fields), samples, ""))

    migs = [
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        for h in handles
        if _mig_enabled(h)
        for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h))
        if _mig_slot(h, j)
    ]
    for read in MIG_READS:
        samples = []
        for _ in range(rounds if migs else 0):
            for mh in migs:
                time_call(lambda mh=mh, read=read: read.calls[0](pynvml, mh), samples)
        rows.append((f"{read.symbols[0]} (MIG handle)", ", ".join(read.fields), samples, "no MIG instances"))

    rows += measure_gpm(rounds, handles)

    es = pynvml.nvmlEventSetCreate()
    try:
        for h in handles:
            pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
        samples = []
        for _ in range(rounds):
            time_call(lambda: pynvml.nvmlEventSetWait_v2(es, 0), samples, (pynvml.NVMLError_Timeout,))
        rows.append(("nvmlEventSetWait_v2 (timeout 0, XID thread)", "DCGM_FI_DEV_XID_ERRORS", samples, ""))
    except pynvml.NVMLError as e:
        rows.append(("nvmlDeviceRegisterEvents / nvmlEventSetWait_v2", "DCGM_FI_DEV_XID_ERRORS", [], str(e)))
    finally:
        pynvml.nvmlEventSetFree(es)
    return rows, header


def measure_gpm(rounds: int, handles: list[Any]) -> list[Row]:
    """One GPM sample and one metrics call per device (and MIG GPU instance), as the source makes them."""
    streams: list[GpmStream] = []
    note = ""
    for h in handles:
        try:
            if not pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
                note = "GPM not supported"
                continue
        except pynvml.NVMLError as e:
            note = str(e)
            continue
        streams.append(GpmStream("bench", h, None))
        if _mig_enabled(h):
            for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
                if _mig_slot(h, j):
                    gi = pynvml.nvmlDeviceGetGpuInstanceId(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j))
                    streams.append(GpmStream("bench-mig", h, int(gi)))
    device = [s for s in streams if s.gpu_instance_id is None]
    mig = [s for s in streams if s.gpu_instance_id is not None]
    sample_dev: list[float] = []
    sample_mig: list[float] = []
    metrics: list[float] = []
    reads: list[float] = []
    try:
        for s in streams:
            s.allocate(pynvml)
            s.prime(pynvml)
        for _ in range(rounds):
            for s in device:
                time_call(lambda s=s: pynvml.nvmlGpmSampleGet(s.handle, s.spare), sample_dev)
            for s in mig:
                time_call(lambda s=s: pynvml.nvmlGpmMigSampleGet(s.handle, s.gpu_instance_id, s.spare), sample_mig)
            for s in streams:
                req = s.request
                req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
                req.numMetrics = len(GPM_FIELDS)
                req.sample1, req.sample2 = s.prev, s.spare
                for i, f in enumerate(GPM_FIELDS):
                    req.metrics[i].metricId = f.metric_id
                time_call(lambda req=req: pynvml.nvmlGpmMetricsGet(req), metrics)
                s.prev, s.spare = s.spare, s.prev
            for s in streams:
                time_call(lambda s=s: s.read(pynvml), reads)
    finally:
        for s in streams:
            s.free(pynvml)
    fields = f"{len(GPM_FIELDS)} DCGM_FI_PROF_* fields"
    return [
        ("nvmlGpmSampleGet (per GPU)", "GPM sample", sample_dev, note or "no GPU with GPM"),
        ("nvmlGpmMigSampleGet (per MIG instance)", "GPM sample", sample_mig, "no MIG instances"),
        (f"nvmlGpmMetricsGet ({len(GPM_FIELDS)} metrics)", fields, metrics, note or "no GPU with GPM"),
        ("GpmStream.read (sample + metrics + conversion)", fields, reads, note or "no GPU with GPM"),
    ]


def _mig_enabled(h: Any) -> bool:
    try:
        return pynvml.nvmlDeviceGetMigMode(h)[0] == pynvml.NVML_DEVICE_MIG_ENABLE
    except pynvml.NVMLError:
        return False


def _mig_slot(h: Any, j: int) -> bool:
    try:
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        return True
    except pynvml.NVMLError:
        return False


async def measure_collect(rounds: int) -> list[Row]:
    """One whole collection of the source (all reads, all GPUs, one worker thread), N times."""
    source = NvmlSource(platform.node(), xid_wait_ms=1000)
    await source.start()
    samples: list[float] = []
    try:
        gpus = 0
        for i in range(min(rounds, 500)):
            t0 = time.perf_counter_ns()
            sample = await source.collect(float(i))
            samples.append((time.perf_counter_ns() - t0) / 1000.0)
            gpus = len(sample.gpus)
    finally:
        await source.close()
    per_gpu = [x / max(gpus, 1) for x in samples]
    return [
        (f"NvmlSource.collect(), {gpus} GPU(s) with GPM, via asyncio.to_thread", "all of the above", samples, ""),
        ("the same, per GPU (target < 5000 µs)", "all of the above", per_gpu, ""),
    ]


if __name__ == "__main__":
    sys.exit(main())
