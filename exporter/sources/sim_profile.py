"""The ``sim`` source's profiling model: DCGM's ``DCGM_FI_PROF_*`` fields from a simulated utilization.

Each simulated pod runs one kind of job, chosen once from its name (deterministic per seed):

============ ======================================================================================
``compute``  training: SMs busy, tensor pipes (HMMA) busy, moderate DRAM; NVLink traffic when the
             pod spans several GPUs
``memory``   inference decoding: SMs half busy, little tensor work (some IMMA), DRAM interface busy
``light``    a loop of tiny kernels: the engine is "active" (``GPU_UTIL`` and ``GR_ENGINE_ACTIVE``
             near the load) but few SMs have work: ``SM_ACTIVE`` exposes it
============ ======================================================================================

The invariants a reader of real DCGM data relies on hold on every sample: ``GR_ENGINE_ACTIVE`` (=
the simulated utilization) >= ``SM_ACTIVE`` >= ``PIPE_TENSOR_ACTIVE`` >= each of
``PIPE_TENSOR_HMMA/IMMA/DFMA_ACTIVE`` (and their sum), ``SM_OCCUPANCY`` <= ``SM_ACTIVE``, all
ratios within 0-1; an idle or free GPU reads 0 everywhere (PCIe sees a trickle).
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass
from typing import Literal

Kind = Literal["compute", "memory", "light"]
KINDS: tuple[Kind, ...] = ("compute", "memory", "light")
GB = 1e9


@dataclass(frozen=True, slots=True)
class JobProfile:
    """How a job's engine time splits (fractions of the level above)."""

    kind: Kind
    sm: float  # SM_ACTIVE / GR_ENGINE_ACTIVE
    occupancy: float  # SM_OCCUPANCY / SM_ACTIVE
    tensor: float  # PIPE_TENSOR_ACTIVE / SM_ACTIVE
    hmma: float  # share of tensor activity that is HMMA (the rest IMMA)
    dram: float  # DRAM_ACTIVE / GR_ENGINE_ACTIVE
    fp32: float  # PIPE_FP32_ACTIVE / SM_ACTIVE
    fp16: float
    pcie_gbps: float  # bytes/s per unit of engine activity, in GB/s
    nvlink_gbps: float


def profile_for(key: str, seed: int, *, multi_gpu: bool) -> JobProfile:
    """The profile of the job called ``key`` (a pod's namespace/name), the same on every call."""
    rng = random.Random(zlib.crc32(f"prof:{seed}:{key}".encode()))
    r = rng.random()
    kind: Kind = "compute" if r < 0.55 else ("memory" if r < 0.85 else "light")
    if kind == "compute":
        return JobProfile(
            kind, rng.uniform(0.85, 0.97), rng.uniform(0.35, 0.6), rng.uniform(0.55, 0.8), rng.uniform(0.9, 1.0),
            rng.uniform(0.25, 0.45), rng.uniform(0.1, 0.2), rng.uniform(0.02, 0.08), rng.uniform(0.5, 2.0),
            rng.uniform(40.0, 120.0) if multi_gpu else 0.0,
        )
    if kind == "memory":
        return JobProfile(
            kind, rng.uniform(0.45, 0.7), rng.uniform(0.2, 0.45), rng.uniform(0.1, 0.3), rng.uniform(0.3, 0.7),
            rng.uniform(0.7, 0.92), rng.uniform(0.15, 0.3), rng.uniform(0.1, 0.2), rng.uniform(1.0, 4.0),
            rng.uniform(5.0, 20.0) if multi_gpu else 0.0,
        )
    return JobProfile(
        kind, rng.uniform(0.05, 0.2), rng.uniform(0.1, 0.3), rng.uniform(0.0, 0.1), 1.0,
        rng.uniform(0.03, 0.1), rng.uniform(0.3, 0.6), 0.0, rng.uniform(0.05, 0.3), 0.0,
    )


DEFAULT_PROFILE = JobProfile("compute", 0.9, 0.45, 0.65, 0.95, 0.35, 0.15, 0.05, 1.0, 0.0)


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def prof_fields(engine: float, p: JobProfile, rng: random.Random) -> dict[str, float]:
    """``DCGM_FI_PROF_*`` for one GPU (or MIG instance) whose graphics engine is active ``engine`` (0-1)."""
    engine = _clip(engine)
    jitter = 1.0 + rng.gauss(0.0, 0.02) if engine > 0 else 1.0
    sm = _clip(engine * p.sm * jitter) if engine > 0 else 0.0
    sm = min(sm, engine)
    tensor = round(min(sm, _clip(sm * p.tensor)), 6)
    hmma = math.floor(tensor * p.hmma * 1e6) / 1e6  # the parts never add up to more than the whole
    imma = math.floor(max(0.0, tensor - hmma) * 1e6) / 1e6
    dram = _clip(engine * p.dram * jitter)
    return {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(engine, 6),
        "DCGM_FI_PROF_SM_ACTIVE": round(sm, 6),
        "DCGM_FI_PROF_SM_OCCUPANCY": round(min(sm, sm * p.occupancy), 6),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": tensor,
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": hmma,
        "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": imma,
        "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": 0.0,
        "DCGM_FI_PROF_PIPE_INT_ACTIVE": round(_clip(sm * 0.08), 6),
        "DCGM_FI_PROF_DRAM_ACTIVE": round(dram, 6),
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE": round(_clip(sm * 0.002), 6),
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE": round(_clip(sm * p.fp32), 6),
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE": round(_clip(sm * p.fp16), 6),
        "DCGM_FI_PROF_PCIE_TX_BYTES": round(engine * p.pcie_gbps * 0.3 * GB + 2.0e5),
        "DCGM_FI_PROF_PCIE_RX_BYTES": round(engine * p.pcie_gbps * GB + 5.0e5),
        "DCGM_FI_PROF_NVLINK_TX_BYTES": round(engine * p.nvlink_gbps * GB),
        "DCGM_FI_PROF_NVLINK_RX_BYTES": round(engine * p.nvlink_gbps * GB),
    }


# --- MIG ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MigSlice:
    profile: str  # "1g.10gb"
    gpu_instance_id: int
    slices: int  # compute slices of 7
    fb_mib: float


def mig_layout(fb_mib: float) -> tuple[MigSlice, ...]:
    """A common mixed layout of one GPU: 3g + 2g + 1g + 1g (7 compute slices), GI ids as NVML assigns them."""
    eighth = fb_mib / 8.0
    gb = round(eighth / 1024.0)
    return (
        MigSlice(f"3g.{4 * gb}gb", 2, 3, 4 * eighth),
        MigSlice(f"2g.{2 * gb}gb", 3, 2, 2 * eighth),
        MigSlice(f"1g.{gb}gb", 9, 1, eighth),
        MigSlice(f"1g.{gb}gb", 10, 1, eighth),
    )
