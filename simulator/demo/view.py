"""The demo's live terminal view (rich): queues, GPUs, RayClusters and the latest decisions.

``render(world, urls)`` returns one rich renderable for ``rich.live.Live``; ``plain_line(world)``
is the one-line summary ``--no-tui`` prints.
"""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from simulator.demo.world import DemoWorld, _clock
from simulator.kueue import ADMITTED, PENDING, RESERVED


def _queues(world: DemoWorld) -> Table:
    e = world.engine
    t = Table(title="Kueue ClusterQueues", expand=True)
    for c in ("queue", "nominal GPUs", "in use", "pending workloads", "oldest pending", "Ray tasks queued"):
        t.add_column(c, justify="right" if c != "queue" else "left")
    for _team, rc in e.rays.items():
        q = e.kueue.cqs[rc.cq]
        pend = [w for w in e.workloads.values() if w.cq == q.name and w.state in (PENDING, RESERVED, ADMITTED)]
        oldest = max((e.now - w.job.submit for w in pend), default=0.0)
        t.add_row(q.name, f"{q.nominal.get(rc.flavor, 0):.0f}", f"{q.usage.get(rc.flavor, 0):.0f}", str(len(pend)),
                  f"{oldest / 60:.0f} min" if pend else "-", str(len(rc.queue)))
    return t


def _gpus(world: DemoWorld) -> Table:
    e = world.engine
    t = Table(title="GPUs (█ busy  ▒ allocated, idle  · free  ✗ unhealthy)", expand=True)
    t.add_column("node")
    t.add_column("GPUs")
    t.add_column("allocated", justify="right")
    util = world.pod_utilization()
    for n in e.cluster.nodes:
        cells = Text()
        for i in range(n.gpus):
            o = n.owner[i]
            if not n.healthy[i]:
                cells.append("✗ ", style="bold red")
            elif o is None:
                cells.append("· ", style="dim")
            elif util.get(o, 0.0) >= 0.05:
                cells.append("█ ", style="green")
            else:
                cells.append("▒ ", style="yellow")
        t.add_row(n.name, cells, f"{n.allocated}/{n.gpus}")
    return t


def _rays(world: DemoWorld) -> Table:
    e = world.engine
    t = Table(title="RayClusters (worker group gpu-workers)", expand=True)
    for c in ("raycluster", "workers", "desired", "min/max", "running tasks", "idle workers", "tasks killed"):
        t.add_column(c, justify="right" if c != "raycluster" else "left")
    for rc in e.rays.values():
        key = (rc.namespace, rc.name, rc.group)
        idle = sum(1 for w in rc.workers.values() if w.task is None and w.ready(e.now))
        t.add_row(f"{rc.namespace}/{rc.name}", str(len(rc.workers)), str(world.published.desired_replicas.get(key, "-")),
                  f"{rc.min_replicas}/{rc.max_replicas}", str(rc.running_tasks(e.now)), str(idle), str(rc.killed_tasks))
    return t


def _decisions(world: DemoWorld) -> Panel:
    lines = list(world.decisions)[-10:] or ["(no decisions yet)"]
    return Panel(Text("\n".join(line[:220] for line in lines)), title="Latest decisions (reason - message)")


def render(world: DemoWorld, urls: list[str]) -> Group:
    e = world.engine
    alloc, used, idle = e.usage_now()
    m = e.metrics
    head = Text.assemble(
        ("queuepilot demo ", "bold"),
        f"sim {_clock(e.now)}  x{world.cfg.speed:g}  |  GPUs {e.cluster.total_gpus}: {alloc} allocated, "
        f"{used:.1f} used, {idle} idle-allocated, {e.cluster.unhealthy_gpus()} unhealthy  |  jobs done "
        f"{m.jobs_completed}\n",
        ("scrape: " + "  ".join(urls), "dim"),
    )
    return Group(head, _queues(world), _gpus(world), _rays(world), _decisions(world))


def plain_line(world: DemoWorld) -> str:
    e = world.engine
    alloc, used, idle = e.usage_now()
    pend = sum(1 for w in e.workloads.values() if w.state in (PENDING, RESERVED, ADMITTED))
    tasks = sum(len(rc.queue) for rc in e.rays.values())
    workers = sum(len(rc.workers) for rc in e.rays.values())
    last = world.decisions[-1] if world.decisions else "-"
    return (f"sim {_clock(e.now)} gpus={e.cluster.total_gpus} allocated={alloc} used={used:.1f} idle={idle} "
            f"unhealthy={e.cluster.unhealthy_gpus()} pending_workloads={pend} queued_tasks={tasks} workers={workers} "
            f"done={e.metrics.jobs_completed} | last: {last[:160]}")
