"""``queuepilot simulate --json`` carries, per policy, the right-sizing ``recommendations`` with the idle
GPU-hours each would have saved over the run; observing the run for them changes none of its numbers;
``SimWriter.annotate_raycluster`` applies the annotation to the simulated RayCluster."""

from __future__ import annotations

import json

from simulator.cli import main
from simulator.engine import SimConfig, run_policies
from simulator.workload import synthetic
from simulator.writer import SimWriter

KEYS = {"namespace", "raycluster", "group", "gpus_per_worker", "recommended_gpus_per_worker",
        "recommended_min_replicas", "recommended_max_replicas", "idle_gpu_hours", "reason"}


def test_json_has_recommendations_with_numeric_idle_gpu_hours(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["--trace", "synthetic", "--hours", "3", "--policies", "queuepilot,ray-idle", "--no-progress",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    for name in ("queuepilot", "ray-idle"):
        recs = data["policies"][name]["recommendations"]
        assert recs, name
        for r in recs:
            assert set(r) == KEYS
            assert isinstance(r["idle_gpu_hours"], float) and r["idle_gpu_hours"] >= 0
    assert "right-sizing" in capsys.readouterr().err


def test_observing_the_run_changes_none_of_its_numbers(tmp_path):
    out = tmp_path / "out.json"
    assert main(["--trace", "synthetic", "--hours", "3", "--policies", "queuepilot", "--no-progress",
                 "--json", str(out)]) == 0
    observed = json.loads(out.read_text())["policies"]["queuepilot"]
    observed.pop("recommendations")
    plain = run_policies(synthetic(3.0, 0, SimConfig().nodes * SimConfig().gpus_per_node).jobs, 3 * 3600.0,
                         ["queuepilot"], SimConfig())["queuepilot"].metrics.summary()
    assert json.loads(json.dumps(plain, sort_keys=True)) == observed


class _Rc:
    version = 4
    group = "gpu-workers"


class _World:
    def __init__(self) -> None:
        self.rc = _Rc()

    def find_ray_cluster(self, namespace: str, name: str):
        return self.rc if (namespace, name) == ("team-a", "team-a-ray") else None


async def test_sim_writer_annotates_the_simulated_raycluster():
    world = _World()
    w = SimWriter(world)  # type: ignore[arg-type]
    out = await w.annotate_raycluster("team-a", "team-a-ray", "queuepilot.io/recommendation", "{}", 1.0)
    assert out.result == "written" and w.annotations[("team-a", "team-a-ray")] == {"queuepilot.io/recommendation": "{}"}
    assert world.rc.version == 5
    assert (await w.annotate_raycluster("team-a", "team-a-ray", "queuepilot.io/recommendation", "{}", 2.0)).result \
        == "unchanged" and world.rc.version == 5
    assert (await w.annotate_raycluster("team-a", "nope", "k", "v", 2.0)).result == "skipped"
    dry = SimWriter(world, dry_run=True)  # type: ignore[arg-type]
    assert (await dry.annotate_raycluster("team-a", "team-a-ray", "k", "v", 3.0)).result == "dry_run"
    assert dry.annotations == {} and world.rc.version == 5
