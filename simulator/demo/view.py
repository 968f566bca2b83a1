"""The demo's live terminal view (rich): teams, GPUs, the latest decisions and, when large jobs
starve behind fragmentation, what an operator can do about it.

``numbers(world)`` is every number the view shows, counted as the metrics count them (GPUs allocated,
idle, unhealthy; per team its waiting workloads and the oldest one's age as a person sees it, its Ray
workers): the controller's and the exporters' ``/metrics`` say the same at the same moment (a test
compares them).  ``render(world, urls, width, height)`` returns one rich renderable for
``rich.live.Live`` that fits ``width`` x ``height`` (80 x 24 by default): the endpoints' URLs stay on
screen, the newest decisions are shown whole (wrapped at word boundaries; older ones give way), and
every other line is cut at a word boundary, never mid-word (``fit``, ``wrap``).  ``plain_line(world)``
is the one-line status printed without the live view; ``story_line`` one decision or GPU event, whole,
on one line; ``hint_lines`` the fragmentation hint.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group
from rich.text import Text

from simulator.demo.world import (
    READY,
    RECLAIM_ANNOTATION,
    RECLAIMED,
    REJECTED,
    REPAIRED,
    RETRY,
    SCALE_DOWN,
    SCALE_UP,
    STALLED,
    UNHEALTHY,
    WAITING,
    DemoWorld,
    StoryEntry,
    _clock,
    _duration,
)
from simulator.kueue import PENDING, RESERVED

WIDTH, HEIGHT = 80, 24
ELLIPSIS = "…"
LABELS = {READY: ("Ready", "green"), RETRY: ("Retry", "yellow"), WAITING: ("Wait", "yellow"),
          REJECTED: ("Reject", "red"),
          UNHEALTHY: ("GPU ✗", "bold red"), REPAIRED: ("GPU ok", "green"), SCALE_DOWN: ("Down", "cyan"),
          SCALE_UP: ("Up", "cyan"), RECLAIMED: ("Reclaim", "cyan"), STALLED: ("Stall", "magenta")}
LABEL_WIDTH = max(len(label) for label, _ in LABELS.values())
IDLE_UTILIZATION = 0.05  # a GPU under this is idle (the exporter's and the controller's threshold)


# ----------------------------------------------------------------------------------- the numbers
@dataclass(frozen=True, slots=True)
class TeamNumbers:
    team: str
    cluster_queue: str
    quota: float  # nominal GPU quota
    in_use: float  # GPUs of quota reserved or in use
    waiting: int  # workloads pending: not admitted, active, not finished (queuepilot_queue_pending_workloads)
    oldest_s: float | None  # the oldest one's age from its creation (queuepilot_queue_oldest_pending_seconds)
    workers: int  # Ray worker pods (queuepilot_raycluster_workers{kind="current"})
    idle_workers: int
    tasks: int  # Ray tasks queued
    killed: int


@dataclass(frozen=True, slots=True)
class Numbers:
    gpus: int
    allocated: int  # held by a pod
    idle: int  # held by a pod and under IDLE_UTILIZATION, as the exporters report it (none off the bus)
    unhealthy: int
    waiting: int
    tasks: int
    jobs_done: int
    teams: tuple[TeamNumbers, ...]


def numbers(world: DemoWorld) -> Numbers:
    """What the view shows, counted the way the metrics count it (see the module docstring)."""
    e = world.engine
    util = world.pod_utilization()
    allocated = idle = 0
    for n in e.cluster.nodes:
        for i, owner in enumerate(n.owner):
            if owner is not None:
                allocated += 1
                # idle as the exporters report it: utilization in whole percent; a GPU off the bus reports none
                idle += n.healthy[i] and round(util.get(owner, 0.0) * 100) < IDLE_UTILIZATION * 100
    teams = []
    for rc in e.rays.values():
        q = e.kueue.cqs[rc.cq]
        pend = [w for w in e.workloads.values() if w.cq == q.name and w.state in (PENDING, RESERVED)]
        teams.append(TeamNumbers(
            rc.team, q.name, q.nominal.get(rc.flavor, 0.0), q.usage.get(rc.flavor, 0.0), len(pend),
            max(e.now - w.created for w in pend) if pend else None, len(rc.workers),
            sum(1 for w in rc.workers.values() if w.task is None and w.ready(e.now)), len(rc.queue), rc.killed_tasks))
    return Numbers(e.cluster.total_gpus, allocated, idle, world.unhealthy_gpus(),
                   sum(t.waiting for t in teams), sum(t.tasks for t in teams), e.metrics.jobs_completed, tuple(teams))


# ----------------------------------------------------------------------------------- text fitting
def fit(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut at a word boundary with an ellipsis."""
    if len(text) <= width:
        return text
    cut = text[: max(0, width - 1)]
    space = cut.rfind(" ")
    if space > 0:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + ELLIPSIS


def wrap(text: str, width: int, lines: int, indent: int = 0) -> list[str]:
    """``text`` wrapped at word boundaries into at most ``lines`` lines of ``width`` (the following ones
    indented by ``indent``); the last line ends with an ellipsis if something is left over."""
    out: list[str] = []
    words = text.split()
    cur = ""
    while words and len(out) < lines:
        room = width - (indent if out else 0)
        w = words[0]
        if not cur and len(w) > room:  # one word longer than a line: the only place a word is cut
            cur, words[0] = w[: room - 1] + ELLIPSIS, ""
            words.pop(0)
            continue
        if len(cur) + (1 if cur else 0) + len(w) <= room:
            cur = f"{cur} {w}" if cur else w
            words.pop(0)
            continue
        out.append(cur)
        cur = ""
    if cur and len(out) < lines:
        out.append(cur)
    if words and out:
        room = width - (indent if len(out) > 1 else 0)
        out[-1] = fit(out[-1] + " " + " ".join(words), room)
    return [(" " * indent + line) if i else line for i, line in enumerate(out)]


# ----------------------------------------------------------------------------------------- parts
def url_lines(urls: list[str], width: int, prometheus: str | None = None) -> list[str]:
    """Where the endpoints are: the exporters' (a port range when they are consecutive; else the first
    and how many more), the controller's (the last URL) and Prometheus' when one runs; on one line when
    it fits ``width``, else one line each."""
    parts: list[tuple[str, str]] = []
    if urls:
        *exp, ctl = urls
        if exp:
            ports = [int(u.rsplit(":", 1)[-1].split("/", 1)[0]) for u in exp]
            first = exp[0]
            if len(exp) > 1 and ports == list(range(ports[0], ports[0] + len(ports))):
                first = first.replace(f":{ports[0]}/", f":{ports[0]}-{ports[-1]}/")
            elif len(exp) > 1:
                first += f" (+{len(exp) - 1})"
            parts.append(("exporters", first))
        parts.append(("controller", ctl))
    if prometheus:
        parts.append(("prometheus", prometheus))
    one = " · ".join(f"{what} {url}" for what, url in parts)
    if len(one) <= width:
        return [one] if one else []
    pad = max(len(what) for what, _ in parts)
    return [f"{what:<{pad}} {url}" for what, url in parts]


def header(world: DemoWorld, urls: list[str], width: int = WIDTH, prometheus: str | None = None) -> list[str]:
    e, n = world.engine, numbers(world)
    lines = [
        f"queuepilot demo · {_clock(e.now)} x{world.cfg.speed:g} · {n.gpus} GPUs: "
        f"{n.allocated} allocated ({n.idle} idle), {n.unhealthy} unhealthy",
        f"waiting: {_n(n.waiting, 'workload')}, {_n(n.tasks, 'Ray task')} · {n.jobs_done:,} jobs done",
    ]
    return lines + url_lines(urls, width, prometheus)


def _n(k: int, what: str) -> str:
    return f"{k:,} {what}{'' if k == 1 else 's'}"


def teams(world: DemoWorld) -> list[str]:
    out = [f"{'team':<8}{'quota':>6}{'in use':>7}{'waiting':>8}{'oldest':>8}  {'workers':>7}{'idle':>5}"
           f"{'tasks':>6}{'killed':>7}"]
    for t in numbers(world).teams:
        oldest = "-" if t.oldest_s is None else _duration(t.oldest_s)
        out.append(f"{t.team:<8}{t.quota:>6.0f}{t.in_use:>7.0f}{t.waiting:>8}{oldest:>8}  {t.workers:>7}"
                   f"{t.idle_workers:>5}{t.tasks:>6}{t.killed:>7}")
    return out


def gpus(world: DemoWorld, width: int) -> list[Text]:
    e = world.engine
    util = world.pod_utilization()
    out = [Text(fit("GPUs: █ busy  ▒ allocated, idle  · free  ✗ unhealthy", width), style="bold")]
    for n in e.cluster.nodes:
        row = Text(f"{n.name:<15}")
        for i in range(n.gpus):
            o = n.owner[i]
            if not world.gpu_healthy(n, i):
                row.append("✗ ", style="bold red")
            elif o is None:
                row.append("· ", style="dim")
            elif util.get(o, 0.0) >= IDLE_UTILIZATION:
                row.append("█ ", style="green")
            else:
                row.append("▒ ", style="yellow")
        row.append(f" {n.allocated}/{n.gpus} allocated")
        row.truncate(width)
        out.append(row)
    return out


def _body(entry: StoryEntry) -> str:
    reason = f" {entry.reason}:" if entry.reason and entry.kind not in (UNHEALTHY, REPAIRED) else ":"
    return f"{entry.subject}{reason} {entry.text}" if entry.subject else entry.text


def story_line(entry: StoryEntry) -> str:
    """One decision or GPU event, whole: ``Mon 10:25 Retry team-a/rayjob-48 Fragmented: ...``."""
    return f"{_clock(entry.at)} {LABELS.get(entry.kind, ('Note', ''))[0]} {_body(entry)}"


def story(world: DemoWorld, width: int, rows: int) -> list[Text]:
    """The newest decisions that fit in ``rows`` lines, each whole (wrapped at word boundaries, its
    numbers included), one per workload/RayCluster/GPU and kind (a Retry repeated at every back-off shows
    once, with its latest message); older decisions give way.  Only a newest decision longer than all
    the rows is cut (with an ellipsis)."""
    blocks: list[list[Text]] = []
    used = 0
    seen: set[tuple[str, str]] = set()
    for entry in reversed(world.story):
        if (entry.kind, entry.subject) in seen:
            continue
        seen.add((entry.kind, entry.subject))
        label, style = LABELS.get(entry.kind, ("Note", ""))
        hhmm = _clock(entry.at).rsplit(" ", 1)[-1]
        first = f"{hhmm} {label:<{LABEL_WIDTH}} "
        whole = wrap(first + _body(entry), width, rows, indent=len(hhmm) + 1)
        if used + len(whole) > rows and blocks:
            break  # an older decision that does not fit whole is left out
        n = min(len(whole), rows - used)
        lines = wrap(first + _body(entry), width, n, indent=len(hhmm) + 1)
        block = []
        for i, line in enumerate(lines):
            t = Text(line)
            if i == 0:
                t.stylize(style, len(hhmm) + 1, len(hhmm) + 1 + len(label))
            block.append(t)
        blocks.append(block)
        used += len(lines)
    out = [t for block in reversed(blocks) for t in block]
    return out or [Text("(no decisions yet: the controller has just taken over)", style="dim")]


def hint_lines(world: DemoWorld) -> list[str]:
    """When multi-GPU workloads starve on ``Fragmented``: which, how long, and what an operator can do."""
    starving = world.starving()
    if not starving:
        return []
    key, gpus_, waited = starving[0]
    more = f" and {len(starving) - 1:,} more" if len(starving) > 1 else ""
    return [
        f"! {key} ({gpus_} GPUs){more} waiting on Fragmented for {_duration(waited)}: 1-GPU workers keep "
        "every node partly used.",
        "  What to do: score GPU nodes MostAllocated (bin-pack); reserve whole nodes for multi-GPU / "
        "multi-node workloads with a ResourceFlavor of their own; enable idle reclaim "
        f"({RECLAIM_ANNOTATION}: \"true\") or stall deactivation.",
    ]


def render(world: DemoWorld, urls: list[str], width: int = WIDTH, height: int = HEIGHT,
           prometheus: str | None = None) -> Group:
    """The whole view in ``width`` x ``height - 1`` (the last row stays free for the cursor)."""
    width = max(40, width)
    budget = max(12, height - 1)
    lines: list[Text] = [Text(fit(line, width), style="bold" if i == 0 else "dim")
                         for i, line in enumerate(header(world, urls, width, prometheus))]
    lines += [Text(fit(line, width), style="bold" if i == 0 else "") for i, line in enumerate(teams(world))]
    lines += gpus(world, width)
    hint: list[Text] = []
    for i, line in enumerate(hint_lines(world)):
        hint += [Text(part, style="bold magenta" if i == 0 else "magenta")
                 for part in wrap(line, width, 1 if i == 0 else 3, indent=2)]
    lines.append(Text(fit("Decisions (simulated time; newest last)", width), style="bold underline"))
    rows = max(2, budget - len(lines) - len(hint))
    lines += story(world, width, rows)
    lines += hint
    return Group(*lines[:budget])


def plain_line(world: DemoWorld) -> str:
    """The status in one line (printed every few seconds without the live view)."""
    n = numbers(world)
    workers = sum(t.workers for t in n.teams)
    return (f"{_clock(world.engine.now)} · {n.gpus} GPUs: {n.allocated} allocated ({n.idle} idle), "
            f"{n.unhealthy} unhealthy · waiting: {_n(n.waiting, 'workload')}, {_n(n.tasks, 'Ray task')} · "
            f"{_n(workers, 'Ray worker')} · {n.jobs_done:,} jobs done")
