"""The demo's live terminal view (rich): teams, GPUs, the latest decisions and, when large jobs
starve behind fragmentation, what an operator can do about it.

``render(world, urls, width, height)`` returns one rich renderable for ``rich.live.Live`` that fits
``width`` x ``height`` (80 x 24 by default) with every line cut at a word boundary, never mid-word
(``fit``, ``wrap``).  ``plain_line(world)`` is the one-line status ``--no-tui`` prints; ``story_line``
one decision or GPU event, whole; ``hint_lines`` the fragmentation hint.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from simulator.demo.world import (
    READY,
    REJECTED,
    REPAIRED,
    RETRY,
    SCALE_DOWN,
    SCALE_UP,
    UNHEALTHY,
    DemoWorld,
    StoryEntry,
    _clock,
    _duration,
)
from simulator.kueue import ADMITTED, PENDING, RESERVED

WIDTH, HEIGHT = 80, 24
ELLIPSIS = "…"
LABELS = {READY: ("Ready", "green"), RETRY: ("Retry", "yellow"), REJECTED: ("Reject", "red"),
          UNHEALTHY: ("GPU ✗", "bold red"), REPAIRED: ("GPU ok", "green"), SCALE_DOWN: ("Down", "cyan"),
          SCALE_UP: ("Up", "cyan")}
RECLAIM_ANNOTATION = "queuepilot.io/reclaim-idle-actors"


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
def header(world: DemoWorld, urls: list[str]) -> list[str]:
    e = world.engine
    alloc, _used, idle = e.usage_now()
    unhealthy = e.cluster.unhealthy_gpus()
    waiting = sum(1 for w in e.workloads.values() if w.state in (PENDING, RESERVED, ADMITTED))
    tasks = sum(len(rc.queue) for rc in e.rays.values())
    ports = [int(u.rsplit(":", 1)[-1].split("/", 1)[0]) for u in urls]
    where = ""
    if ports:
        exp, ctl = ports[:-1], ports[-1]
        if not exp:
            where = f" · metrics :{ctl}"
        elif exp == list(range(exp[0], exp[0] + len(exp))):
            where = f" · metrics :{exp[0]}-{exp[-1]}, :{ctl}" if len(exp) > 1 else f" · metrics :{exp[0]}, :{ctl}"
        else:
            where = f" · metrics :{exp[0]} (+{len(exp) - 1}), :{ctl}"
    return [
        f"queuepilot demo · {_clock(e.now)} x{world.cfg.speed:g} · {e.cluster.total_gpus} GPUs: "
        f"{alloc} allocated ({idle} idle), {unhealthy} unhealthy",
        f"waiting: {_n(waiting, 'workload')}, {_n(tasks, 'Ray task')} · {e.metrics.jobs_completed:,} jobs done{where}",
    ]


def _n(k: int, what: str) -> str:
    return f"{k:,} {what}{'' if k == 1 else 's'}"


def teams(world: DemoWorld) -> list[str]:
    e = world.engine
    out = [f"{'team':<8}{'quota':>6}{'in use':>7}{'waiting':>8}{'oldest':>8}  {'workers':>7}{'idle':>5}"
           f"{'tasks':>6}{'killed':>7}"]
    for rc in e.rays.values():
        q = e.kueue.cqs[rc.cq]
        pend = [w for w in e.workloads.values() if w.cq == q.name and w.state in (PENDING, RESERVED, ADMITTED)]
        oldest = _duration(max(e.now - w.job.submit for w in pend)) if pend else "-"
        idle = sum(1 for w in rc.workers.values() if w.task is None and w.ready(e.now))
        out.append(f"{rc.team:<8}{q.nominal.get(rc.flavor, 0):>6.0f}{q.usage.get(rc.flavor, 0):>7.0f}{len(pend):>8}"
                   f"{oldest:>8}  {len(rc.workers):>7}{idle:>5}{len(rc.queue):>6}{rc.killed_tasks:>7}")
    return out


def gpus(world: DemoWorld, width: int) -> list[Text]:
    e = world.engine
    util = world.pod_utilization()
    out = [Text(fit("GPUs: █ busy  ▒ allocated, idle  · free  ✗ unhealthy", width), style="bold")]
    for n in e.cluster.nodes:
        row = Text(f"{n.name:<15}")
        for i in range(n.gpus):
            o = n.owner[i]
            if not n.healthy[i]:
                row.append("✗ ", style="bold red")
            elif o is None:
                row.append("· ", style="dim")
            elif util.get(o, 0.0) >= 0.05:
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
    """The newest decisions that fit in ``rows`` lines, one per workload/RayCluster/GPU and kind (a
    Retry repeated at every back-off shows once, with its latest message); a Retry or a GPU failure
    may take two lines."""
    blocks: list[list[Text]] = []
    used = 0
    seen: set[tuple[str, str]] = set()
    long_shown: set[str] = set()
    for entry in reversed(world.story):
        if (entry.kind, entry.subject) in seen:
            continue
        seen.add((entry.kind, entry.subject))
        label, style = LABELS.get(entry.kind, ("Note", ""))
        hhmm = _clock(entry.at).rsplit(" ", 1)[-1]
        first = f"{hhmm} {label:<6} "
        n = 2 if entry.kind in (RETRY, UNHEALTHY) and entry.kind not in long_shown else 1
        long_shown.add(entry.kind)
        n = min(n, rows - used)
        if n <= 0:
            break
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
        "  What to do: reserve whole nodes for multi-GPU / multi-node workloads with a ResourceFlavor of "
        f"their own; enable idle reclaim ({RECLAIM_ANNOTATION}: \"true\") or stall deactivation.",
    ]


def render(world: DemoWorld, urls: list[str], width: int = WIDTH, height: int = HEIGHT) -> Group:
    """The whole view in ``width`` x ``height - 1`` (the last row stays free for the cursor)."""
    width = max(40, width)
    budget = max(12, height - 1)
    lines: list[Text] = [Text(fit(line, width), style="bold" if i == 0 else "dim")
                         for i, line in enumerate(header(world, urls))]
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
    e = world.engine
    alloc, _used, idle = e.usage_now()
    pend = sum(1 for w in e.workloads.values() if w.state in (PENDING, RESERVED, ADMITTED))
    tasks = sum(len(rc.queue) for rc in e.rays.values())
    workers = sum(len(rc.workers) for rc in e.rays.values())
    return (f"{_clock(e.now)} · {e.cluster.total_gpus} GPUs: {alloc} allocated ({idle} idle), "
            f"{e.cluster.unhealthy_gpus()} unhealthy · waiting: {_n(pend, 'workload')}, {_n(tasks, 'Ray task')} · "
            f"{_n(workers, 'Ray worker')} · {e.metrics.jobs_completed:,} jobs done")
