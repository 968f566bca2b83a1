"""The demo tells the truth, quickly: stepped headless (tests/demo/stepper.py) at the default speed for the
simulated equivalent of 60 real seconds, the real controller over the demo's world and its real exporters
make every part of the story (a Ray scale-up and a scale-down, a Retry with its reason, a Rejected, idle
GPUs reclaimed, a stalled workload flagged), and at every step the numbers the view shows are the ones the
controller's and the exporters' /metrics say.  The live view fits 80x24 with the newest decisions whole and
says what to do when large jobs starve on Fragmented."""

from __future__ import annotations

import asyncio
import io
import re
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from simulator.demo.view import (
    ELLIPSIS,
    LABEL_WIDTH,
    LABELS,
    Numbers,
    _body,
    fit,
    header,
    hint_lines,
    numbers,
    plain_line,
    render,
    story_line,
    teams,
    wrap,
)
from simulator.demo.world import (
    READY,
    RECLAIMED,
    REJECTED,
    REPAIRED,
    RETRY,
    SCALE_DOWN,
    SCALE_UP,
    STALLED,
    STORY_KINDS,
    UNHEALTHY,
    WAITING,
    DemoConfig,
    _clock,
    classify,
)
from tests.demo.stepper import Demo, stepped_demo

REAL_SECONDS = 60.0


Samples = dict[str, list[tuple[dict[str, str], float]]]  # sample name -> (labels, value)
CONTROLLER_FAMILIES = ("queuepilot_flavor_gpus", "queuepilot_queue_pending_workloads",
                       "queuepilot_queue_oldest_pending_seconds", "queuepilot_raycluster_workers")
EXPORTER_FAMILIES = ("queuepilot_gpu_healthy", "queuepilot_gpu_allocated", "DCGM_FI_DEV_GPU_UTIL")


def _collect(registry, families: tuple[str, ...]) -> Samples:
    """What /metrics renders of ``families``, read from the registry it renders (no text round trip)."""
    out: Samples = {}
    for metric in registry.collect():
        if metric.name in families:
            for s in metric.samples:
                out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _samples(samples: Samples | str, family: str) -> list[tuple[dict[str, str], float]]:
    if isinstance(samples, str):  # /metrics text
        return [(dict(s.labels), s.value) for f in text_string_to_metric_families(samples) for s in f.samples
                if s.name == family]
    return samples.get(family, [])


def _controller_text(demo: Demo) -> str:
    from prometheus_client import generate_latest

    return generate_latest(demo.controller.registry).decode()


def _controller_samples(demo: Demo) -> Samples:
    return _collect(demo.controller.registry, CONTROLLER_FAMILIES)


def _exporter_samples(demo: Demo) -> list[Samples]:
    return [_collect(app.registry, EXPORTER_FAMILIES) for app in demo.exporters]


def disagreements(n: Numbers, ctl: Samples | str, exporters: list[Samples] | list[str]) -> list[str]:
    """Where the view's numbers and the metrics differ (empty: they agree)."""
    out = []

    def same(what: str, view: float | None, metric: float | None) -> None:
        if view != metric:
            out.append(f"{what}: view {view}, metrics {metric}")

    flavor = {lab["state"]: v for lab, v in _samples(ctl, "queuepilot_flavor_gpus")}
    same("unhealthy GPUs (controller)", n.unhealthy, flavor.get("unhealthy"))
    same("healthy GPUs (controller)", n.gpus - n.unhealthy, flavor.get("healthy"))
    same("allocated GPUs (controller)", n.allocated, flavor.get("allocated"))
    health = [v for t in exporters for _, v in _samples(t, "queuepilot_gpu_healthy")]
    same("GPUs (exporters)", n.gpus, len(health))
    same("unhealthy GPUs (exporters)", n.unhealthy, sum(1 for v in health if v == 0))
    allocated = {lab["uuid"] for t in exporters for lab, v in _samples(t, "queuepilot_gpu_allocated") if v == 1}
    same("allocated GPUs (exporters)", n.allocated, len(allocated))
    idle = sum(1 for t in exporters for lab, v in _samples(t, "DCGM_FI_DEV_GPU_UTIL")
               if lab["UUID"] in allocated and v < 5)
    same("idle allocated GPUs (exporters)", n.idle, idle)
    pending = {lab["cluster_queue"]: v for lab, v in _samples(ctl, "queuepilot_queue_pending_workloads")}
    oldest = {lab["cluster_queue"]: v for lab, v in _samples(ctl, "queuepilot_queue_oldest_pending_seconds")}
    workers = {lab["namespace"]: v for lab, v in _samples(ctl, "queuepilot_raycluster_workers")
               if lab["kind"] == "current"}
    for t in n.teams:
        same(f"{t.team} waiting", t.waiting, pending.get(t.cluster_queue))
        same(f"{t.team} oldest", t.oldest_s or 0.0, oldest.get(t.cluster_queue))
        same(f"{t.team} workers", t.workers, workers.get(t.team))
    return out


@pytest.fixture(scope="module")
def first_minute() -> tuple[Demo, list[tuple[float, list[str]]], dict[str, float], list[str]]:
    """The first real minute, with the view's numbers compared against /metrics after every step; the
    demo is stopped after it (its world, counters and exporters' last states stay readable)."""
    checked: list[tuple[float, list[str]]] = []
    first: dict[str, float] = {}
    seen: list[tuple[Numbers, list[Samples]]] = []
    hint_view: list[str] = []

    def look(demo: Demo) -> None:  # the view and the exporters, as the controller's pass is about to see them
        seen[:] = [(numbers(demo.world), _exporter_samples(demo))]

    def compare(demo: Demo) -> None:  # ... against the controller's metrics of that pass
        (n, exporters), = seen
        checked.append((demo.real_seconds, disagreements(n, _controller_samples(demo), exporters)))
        for entry in demo.world.story:
            first.setdefault(entry.kind, (entry.at - (demo.world.handed_over_at or 0.0)) / demo.world.cfg.speed)
        if not hint_view and demo.world.starving():
            console = Console(width=100, height=60, record=True, color_system=None, legacy_windows=False,
                              file=io.StringIO())
            console.print(render(demo.world, demo.urls, 100, 60))
            hint_view.append(console.export_text())

    async def minute() -> Demo:
        # the scripted GPU is repaired 5 simulated minutes after its XID 79, inside the exporters' 10-minute
        # fatal-XID window: the view, the exporters and the controller must all keep it unhealthy until then
        async with stepped_demo(DemoConfig(repair_mean_s=300.0)) as demo:
            await demo.run(REAL_SECONDS, look, compare)
        return demo

    return asyncio.run(minute()), checked, first, hint_view


def test_the_first_minute_shows_the_whole_story(first_minute):
    demo, _, first, _ = first_minute
    world = demo.world
    start = world.handed_over_at
    assert start is not None and 9 * 3600 <= start % 86400 <= 17 * 3600  # opens at a busy hour
    print("seconds until each part of the story first shows:",
          ", ".join(f"{k} {first[k]:.2f}" for k in sorted(first, key=first.get)))
    late = {k: first.get(k) for k in STORY_KINDS if first.get(k) is None or first[k] > REAL_SECONDS}
    assert not late, (late, first)
    story = {}
    for entry in world.story:
        story.setdefault(entry.kind, entry)
    retry = story[RETRY]
    assert retry.reason in ("Fragmented", "InsufficientGpus") and "largest free healthy blocks" in retry.text
    assert story[REJECTED].reason == "PodLargerThanNode" and "needs 12 GPUs per pod" in story[REJECTED].text
    # (the quota a workload holds while it waits for GPUs can leave less headroom than the demand wants)
    assert story[SCALE_UP].reason in ("PendingDemand", "ScaleUpLimit", "QuotaHeadroomLimit")
    assert "pending Ray bundle" in story[SCALE_UP].text
    assert "memory: 64 GiB" in story[SCALE_UP].text  # numbers for people, not 6.87195e+10
    assert story[SCALE_DOWN].reason == "IdleWorkers"
    assert story[RECLAIMED].subject == "team-b/team-b-ray" and "hold Ray actors" in story[RECLAIMED].text
    assert story[STALLED].subject == f"team-a/{world.hung}" and "under 5%" in story[STALLED].text
    # the scripted GPU failure landed on a GPU holding running work
    assert "XID 79" in story[UNHEALTHY].text and "keeps it" in story[UNHEALTHY].text
    # the controller's own counters agree with the story
    ctl = _controller_text(demo)

    def total(family: str, **labels: str) -> float:
        return sum(v for lab, v in _samples(ctl, family) if all(lab.get(k) == x for k, x in labels.items()))

    assert total("queuepilot_admission_decisions_total", state="Ready") >= world.counts[READY] > 0
    assert total("queuepilot_admission_decisions_total", state="Retry") >= world.counts[RETRY] > 0
    assert total("queuepilot_admission_decisions_total", state="Rejected") == world.counts[REJECTED] == 1
    assert total("queuepilot_scale_decisions_total", direction="up") >= world.counts[SCALE_UP] > 0
    assert total("queuepilot_scale_decisions_total", direction="down") >= world.counts[SCALE_DOWN] + \
        world.counts[RECLAIMED] > 0
    assert total("queuepilot_stalled_workloads", cluster_queue="cq-team-a") == 1  # the hung workload, still hung


def test_the_view_and_the_metrics_agree_at_every_step(first_minute):
    demo, checked, _, _ = first_minute
    assert len(checked) == REAL_SECONDS / 0.25
    wrong = [(round(t, 2), d) for t, d in checked if d]
    assert wrong == []
    # the comparison saw the numbers move: the scripted GPU failed, came back on the bus 5 simulated minutes
    # later, inside its 10-minute XID window, and turned healthy only when the window ended (the exporters'
    # window runs on the demo's clock: on real seconds it would have ended at once, or after 10 real minutes)
    failed = next(e for e in demo.world.story if e.kind == UNHEALTHY and "keeps it" in e.text)
    healthy = next(e for e in demo.world.story if e.kind == REPAIRED and e.subject == failed.subject and e.at > failed.at)
    assert 600 <= healthy.at - failed.at <= 600 + 0.25 * demo.world.cfg.speed


def test_the_view_fits_80x24_with_the_newest_decisions_whole(first_minute):
    demo, *_ = first_minute
    world, urls = demo.world, demo.urls
    console = Console(width=80, height=24, record=True, color_system=None, legacy_windows=False,
                      file=io.StringIO())
    console.print(render(world, urls, 80, 24))
    shown = console.export_text().rstrip("\n").split("\n")
    assert len(shown) <= 23
    assert all(len(line) <= 80 for line in shown), shown
    assert shown[0].startswith("queuepilot demo · Mon ")
    # the endpoints stay on screen
    text = "\n".join(shown)
    for url in urls[-1:]:
        assert url in text
    assert urls[0].rsplit("/", 1)[0] in text
    # the newest decision is shown whole, its numbers included
    newest = world.story[-1]
    label = LABELS.get(newest.kind, ("Note", ""))[0]
    whole = f"{_clock(newest.at).rsplit(' ', 1)[-1]} {label:<{LABEL_WIDTH}} {_body(newest)}"
    at = next(i for i, line in enumerate(shown) if line.startswith(whole.split(" ", 1)[0] + " ")
              and newest.subject in line)
    joined = " ".join(line.strip() for line in shown[at:])
    assert " ".join(whole.split()) in joined, (whole, shown[at:])
    assert ELLIPSIS not in " ".join(shown[at:at + 3])
    # no word is chopped: every token is a word of what the view was given, or cut at a word with …
    words = set()
    for line in ([story_line(e) for e in world.story] + header(world, urls, 80) + teams(world) + hint_lines(world)
                 + ["Decisions (simulated time; newest last)", "GPUs: █ busy ▒ allocated, idle · free ✗ unhealthy"]):
        words.update(line.split())
    for line in shown:
        for token in line.split():
            if token.endswith(ELLIPSIS):
                token = token[:-1]
                if not token:
                    continue
                assert token in words or token.rstrip(",;:") in words, (token, line)
            elif re.fullmatch(r"[█▒·✗]|\d+/\d+|[\w-]+", token) is None:
                assert token in words, (token, line)
    assert plain_line(world).startswith("Mon ")


def test_starving_large_jobs_get_a_hint(first_minute):
    """While a multi-GPU workload waits on Fragmented for over 10 simulated minutes, the view says so and
    what an operator can do."""
    *_, hint_view = first_minute
    assert hint_view, "expected a multi-GPU workload waiting on Fragmented for > 10 simulated minutes"
    text = " ".join(hint_view[0].split())
    assert "Fragmented" in text and "whole nodes" in text and "queuepilot.io/reclaim-idle-actors" in text
    assert "stall deactivation" in text


def test_one_line_per_decision_without_the_live_view(first_minute):
    demo, *_ = first_minute
    lines = [story_line(e) for e in demo.world.story]
    assert all("\n" not in line for line in lines)
    kinds = Counter(e.kind for e in demo.world.story)
    assert len(lines) == sum(kinds.values())
    retry = next(line for line, e in zip(lines, demo.world.story, strict=True) if e.kind == RETRY)
    assert re.match(r"^Mon \d\d:\d\d Retry team-\w/rayjob-\d+ (Fragmented|InsufficientGpus): needs .* retry in ", retry)


def test_fit_and_wrap_cut_at_word_boundaries():
    assert fit("short", 80) == "short"
    assert fit("largest free healthy blocks: 3, 3, 2", 20) == "largest free…"
    assert len(fit("a" * 100, 10)) <= 10
    lines = wrap("needs 1 pod x 8 GPUs; largest free healthy blocks: 5, 2, 1 (8 free, 0 promised)", 30, 2, indent=4)
    assert len(lines) == 2 and all(len(line) <= 30 for line in lines)
    assert lines[1].startswith("    ") and lines[1].endswith(ELLIPSIS)
    assert " ".join(lines).replace(ELLIPSIS, "").split()[:-1] == \
        "needs 1 pod x 8 GPUs; largest free healthy blocks: 5, 2, 1".split()[: len(" ".join(lines).split()) - 1]


def test_decision_lines_are_classified():
    kind, who, reason, text = classify("team-a/rayjob-7 [cq-team-a] Retry Fragmented: needs 1 pod x 8 GPUs (workers) "
                                       "on flavor a100; largest free healthy blocks: 5, 2, 1 (8 free, 0 promised, "
                                       "0 unhealthy); retry in 900s")
    assert (kind, who, reason) == (RETRY, "team-a/rayjob-7", "Fragmented")
    assert text == "needs 1 pod x 8 GPUs; largest free healthy blocks: 5, 2, 1 (8 free, 0 promised, 0 unhealthy); " \
                   "retry in 15 min"
    kind, who, reason, text = classify("team-b/team-b-ray/gpu-workers down 6->5 IdleWorkers: scale down 6 -> 5: 1 "
                                       "worker(s) idle (GPU gr_engine_active under 5%, no Ray work) for 1.5m")
    assert (kind, who, reason) == (SCALE_DOWN, "team-b/team-b-ray", "IdleWorkers")
    assert text == "1 worker idle (GPU under 5%, no Ray work) for 1.5 min"
    assert classify("ns/rc/g down 5->2 IdleWorkers: 3 worker(s) idle for 2m")[3] == "3 workers idle for 2 min"
    assert classify("team-a/w [cq] Ready CapacityConfirmed: 4 healthy GPUs reserved (a100: n 4)")[0] == READY
    assert classify("team-a/w [cq] Pending Fragmented: needs 1 pod x 8 GPUs (workers) on flavor a100; no free block "
                    "fits; waiting with quota reserved for up to 1800s from its reservation, then Retry")[:3] == \
        (WAITING, "team-a/w", "Fragmented")
    assert classify("ns/rc/g down 5->3 IdleActorsReclaimed: 2 worker(s) idle")[0] == RECLAIMED
    kind, who, reason, text = classify(
        "team-a/rayjob-41 StalledWorkload: workload team-a/rayjob-41 (RayJob rayjob-41) in ClusterQueue cq-team-a: all "
        "4 GPU(s) under 5% GPU gr_engine_active (highest 0%) for 30m, since 1970-01-01T10:00:15Z (stall window 30m)")
    assert (kind, who, reason) == (STALLED, "team-a/rayjob-41", "StalledWorkload")
    assert text == "all 4 GPUs under 5% GPU gr_engine_active (highest 0%) for 30 min (stall window 30m)"
    up = classify("t/rc/g up 2->6 PendingDemand: scale up 2 -> 6: 6 pending Ray bundle(s) (6 GPUs) need 6 worker(s) of "
                  "{CPU: 8, GPU: 1, memory: 64 GiB}; 0 starting")
    assert up[0] == SCALE_UP and "{CPU: 8, GPU: 1, memory: 64 GiB}" in up[3]
