"""The demo tells its story in the first real minute: stepped headless (no real-time sleeping) for the
simulated equivalent of 60 real seconds at the default speed, the real controller over the demo's
world and its real exporters makes a Ready, a Retry with its reason, sees a GPU go unhealthy and
scales idle workers down; the live view fits 80x24 without chopping a word and says what to do when
large jobs starve on Fragmented."""

from __future__ import annotations

import re

import aiohttp
from rich.console import Console

from autoscaler.signals.gpu_scrape import ScrapeGpuSignal
from exporter.server import ExporterApp
from servicekit.listen import ListenAddress
from simulator.demo.app import STEP_S, demo_controller
from simulator.demo.view import ELLIPSIS, fit, header, hint_lines, plain_line, render, story_line, teams, wrap
from simulator.demo.world import READY, RETRY, SCALE_DOWN, UNHEALTHY, DemoConfig, DemoWorld, classify

REAL_SECONDS = 60.0


def _sample_sum(controller, family: str, **labels: str) -> float:
    total = 0.0
    for metric in controller.registry.collect():
        for s in metric.samples:
            if s.name == family and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


async def _first_minute() -> tuple[DemoWorld, object, list[str], float]:
    cfg = DemoConfig()
    world = DemoWorld(cfg)
    await world.warm_up()
    exporters = [ExporterApp(src, listen="127.0.0.1:0", hostname=name, interval=0.5)
                 for name, src in world.sources.items()]
    for app in exporters:
        app.pod_resources = app.agent.pod_resources = world.pod_resources[app.hostname]
    session = aiohttp.ClientSession()

    async def discover() -> list[tuple[str, str]]:
        return [(app.hostname, app.metrics_url.removesuffix("/metrics")) for app in exporters]

    gpu = ScrapeGpuSignal(session, discover, lambda kind: None)
    c = demo_controller(world, ListenAddress("127.0.0.1", 0), exporters, gpu_signal=gpu)
    world.hand_over(c.published, c.counters, lambda: None)
    unhealthy_seen = 0.0
    try:
        for app in exporters:
            await app.start()
        start = world.sim_now
        step = STEP_S * cfg.speed
        t = start
        while t < start + REAL_SECONDS * cfg.speed:
            t += step
            await world.step_to(t)
            for app in exporters:  # what the exporters' own loops do every 0.5 real seconds
                await app.agent.collect_once()
            await gpu.poll(c.clock())
            await c.ray.poll(c.source.ray_targets(), c.clock())
            snap = await c.run_pass()
            if snap is not None:
                unhealthy_seen = max(unhealthy_seen, snap.flavor_capacity("a100").unhealthy)
        urls = [app.metrics_url for app in exporters] + ["http://127.0.0.1:8080/metrics"]
    finally:
        for app in exporters:
            await app.stop()
        await c.shutdown()
        await session.close()
    return world, c, urls, unhealthy_seen


async def test_the_first_minute_shows_ready_retry_unhealthy_gpu_and_scale_down():
    world, c, urls, unhealthy_seen = await _first_minute()
    start = world.handed_over_at
    minute = REAL_SECONDS * world.cfg.speed
    assert start is not None and 9 * 3600 <= start % 86400 <= 17 * 3600  # opens at a busy hour
    first = {}
    for entry in world.story:
        first.setdefault(entry.kind, entry)
    # each of the four kinds, as the world told it from the controller's decision lines and the GPUs
    for kind in (READY, RETRY, UNHEALTHY, SCALE_DOWN):
        assert world.counts[kind] >= 1, (kind, world.counts)
        assert first[kind].at - start <= minute, (kind, first[kind])
    retry = first[RETRY]
    assert retry.reason in ("Fragmented", "InsufficientGpus") and "largest free healthy blocks" in retry.text
    assert "XID 79" in first[UNHEALTHY].text
    # the scripted failure landed on a GPU holding running work, and the controller saw it
    assert "keeps it" in first[UNHEALTHY].text
    assert unhealthy_seen >= 1
    # the controller's own counters agree with the story
    assert _sample_sum(c, "queuepilot_admission_decisions_total", state="Ready") >= world.counts[READY] > 0
    assert _sample_sum(c, "queuepilot_admission_decisions_total", state="Retry") >= world.counts[RETRY] > 0
    assert _sample_sum(c, "queuepilot_scale_decisions_total", direction="down") >= world.counts[SCALE_DOWN] > 0

    # the view: 80x24, every line within the width, no word chopped, a header for people
    console = Console(width=80, height=24, record=True, color_system=None, legacy_windows=False)
    console.print(render(world, urls, 80, 24))
    shown = console.export_text().rstrip("\n").split("\n")
    assert len(shown) <= 23
    assert all(len(line) <= 80 for line in shown), shown
    assert "{" not in shown[0] and shown[0].startswith("queuepilot demo · Mon ")
    words = set()
    for text in ([story_line(e) for e in world.story] + header(world, urls) + teams(world) + hint_lines(world)
                 + ["Decisions (simulated time; newest last)", "GPUs: █ busy ▒ allocated, idle · free ✗ unhealthy"]):
        words.update(text.split())
    for line in shown:
        for token in line.split():
            if token.endswith(ELLIPSIS):
                token = token[:-1]
                if not token:
                    continue
                assert token in words or token.rstrip(",;:") in words, (token, line)
            elif re.fullmatch(r"[█▒·✗]|\d+/\d+|[\w-]+", token) is None:
                assert token in words, (token, line)
    # large jobs starving on Fragmented: the view says so and what an operator can do
    assert world.starving(), "expected a multi-GPU workload waiting on Fragmented for > 10 simulated minutes"
    text = " ".join(shown)
    assert "Fragmented" in text and "whole nodes" in text and "queuepilot.io/reclaim-idle-actors" in text
    assert "stall deactivation" in text
    assert plain_line(world).startswith("Mon ")


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
