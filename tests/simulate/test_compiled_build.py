"""The mypyc-compiled simulator the policy benchmarks run (benchmarks/compiled.py) decides exactly as the
sources do, and a build that is not the checkout's is refused rather than measured.

The build is real (mypyc on the modules ``MODULES`` names, about 1.5 min on 2 cores), and so are the
runs: the same windows under the same policies, once on the sources and once on the build, each in a
fresh interpreter, must give the same summaries, number for number."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import compiled

ROOT = Path(__file__).resolve().parents[2]

# (trace, hours, seed, utilization model, GPU failure rate per GPU-day, policy, stall reclaim): the
# compiled modules' paths (the ledger, KubeRay, Kueue, the admission check, the scaler with idle-actor
# reclaim, the stall detector, the baselines' engine side), GPU failures included
RUNS = (
    ("philly", 24.0, 1, "grounded", 0.05, "queuepilot-reclaim", True),
    ("philly", 24.0, 2, "scattered", 0.01, "kueue-quota", False),
    ("philly", 24.0, 1, "serving", 0.01, "queuepilot", True),
    ("synthetic", 6.0, 3, "grounded", 0.5, "queuepilot-reclaim", False),
    ("synthetic", 6.0, 3, "grounded", 0.5, "ray-idle", False),
)

# run in a fresh interpreter: select the build (or not), then import the simulator and run RUNS
RUNNER = """
import json, sys
from dataclasses import replace
sys.path.insert(0, sys.argv[1])
from benchmarks.compiled import select_build
stamp = select_build()
import simulator.engine, autoscaler.core.policy.scaling
from benchmarks.sim_runs import bench_config
from simulator.cli import default_trace, load_window
from simulator.engine import Engine
out = {"compiled": stamp is not None,
       "files": [simulator.engine.__file__, autoscaler.core.policy.scaling.__file__], "summaries": []}
for trace, hours, seed, model, rate, policy, stall in json.loads(sys.argv[2]):
    cfg = replace(bench_config(seed=seed, gpu_failure_rate=rate), stall_reclaim=stall)
    window = load_window(str(default_trace()) if trace == "philly" else trace, "2017-10-03", hours, seed,
                         cfg.nodes * cfg.gpus_per_node, util_model=model)
    eng = Engine(window.jobs, hours * 3600.0, policy, cfg)
    eng.run()
    out["summaries"].append(eng.metrics.summary())
print(json.dumps(out, default=str))
"""


def _run(env_build: Path | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != compiled.ENV}
    if env_build is not None:
        env[compiled.ENV] = str(env_build)
    done = subprocess.run([sys.executable, "-c", RUNNER, str(ROOT), json.dumps(RUNS)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compiled") / "build"
    compiled.build(out, quiet=True)
    return out


def test_the_compiled_build_decides_as_the_sources_do(build: Path) -> None:
    plain = _run(None)
    fast = _run(build)
    assert plain["compiled"] is False and fast["compiled"] is True
    # the build's extensions ran, not its copies of the sources
    assert all(str(f).endswith(".py") and str(f).startswith(str(ROOT)) for f in plain["files"])  # type: ignore[attr-defined]
    assert all(str(f).endswith(".so") and str(f).startswith(str(build)) for f in fast["files"])  # type: ignore[attr-defined]
    assert len(fast["summaries"]) == len(RUNS)  # type: ignore[arg-type]
    for run, a, b in zip(RUNS, plain["summaries"], fast["summaries"], strict=True):  # type: ignore[call-overload]
        assert a == b, f"{run}: the compiled simulator decided otherwise"
        assert a["jobs_completed"] > 0


def test_the_build_records_every_module_and_the_checkout_it_came_from(build: Path) -> None:
    stamp = compiled.check(build)
    assert stamp["modules"] == list(compiled.MODULES)
    assert stamp["sources"] == compiled.source_hash(ROOT)
    for module in compiled.MODULES:
        assert list((build / module).parent.glob(Path(module).stem + ".*.so")), module


def _fake_build(path: Path, **changes: object) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    stamp = {"sources": compiled.source_hash(ROOT), "modules": list(compiled.MODULES), "mypy": "x",
             "python": f"{sys.implementation.name}-{sys.version_info.major}.{sys.version_info.minor}", **changes}
    (path / compiled.STAMP).write_text(json.dumps(stamp))
    return path


def test_make_compiled_builds_again_for_another_interpreter(tmp_path: Path) -> None:
    """A build from this checkout is up to date only for the interpreter that built it (``make compiled``
    runs in the bench venv, whose interpreter may not be the one a build in place came from); a
    benchmark may still run on it (``check``)."""
    mine = _fake_build(tmp_path / "mine", interpreter=compiled.interpreter())
    assert compiled._current(mine) is not None
    other = _fake_build(tmp_path / "other", interpreter="CPython 3.11.0 (/elsewhere/python3.11)")
    assert compiled._current(other) is None
    assert compiled.check(other)["mypy"] == "x"
    assert compiled._current(_fake_build(tmp_path / "older")) is None  # a stamp from before the key


def test_a_build_from_other_sources_or_another_python_is_refused(tmp_path: Path) -> None:
    assert compiled.check(_fake_build(tmp_path / "ok"))["mypy"] == "x"
    with pytest.raises(compiled.StaleBuild, match="other sources"):
        compiled.check(_fake_build(tmp_path / "stale", sources="0" * 64))
    with pytest.raises(compiled.StaleBuild, match=r"built for cpython-3\.0"):
        compiled.check(_fake_build(tmp_path / "old", python="cpython-3.0"))
    with pytest.raises(compiled.StaleBuild, match="no compiled build"):
        compiled.check(tmp_path / "missing")


def test_a_stale_build_stops_a_benchmark_before_it_runs(tmp_path: Path) -> None:
    stale = _fake_build(tmp_path / "stale", sources="0" * 64)
    env = {**os.environ, compiled.ENV: str(stale)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "policy.py"), "--quick", "--no-progress"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: ") and "built from other sources than this checkout's" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_the_variable_nothing_is_selected() -> None:
    before = (list(sys.path), list(sys.meta_path))
    assert compiled.select_build({}) is None
    assert compiled.select_build({compiled.ENV: "  "}) is None
    assert (sys.path, sys.meta_path) == before
    assert "interpreted" in compiled.describe(None)


def test_a_build_selected_after_the_simulator_was_imported_is_refused(tmp_path: Path) -> None:
    import simulator.engine  # noqa: F401  (imported from the sources, as in this test process)

    with pytest.raises(RuntimeError, match="already imported"):
        compiled.select_build({compiled.ENV: str(_fake_build(tmp_path / "ok"))})
