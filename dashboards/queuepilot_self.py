"""queuepilot itself: leader, loop time, watch restarts, signal ages, source and write errors, and the
health of the node exporters."""

from __future__ import annotations

from autoscaler import metrics as cm
from dashboards import common as c
from exporter import metrics as em

UID = "queuepilot-self"

CL = 'cluster=~"$cluster"'
NODE = 'cluster=~"$cluster",hostname=~"$node"'


def build():
    panels = [
        (c.row("Controller"), 24, 1),
        (c.stat(
            "Leaders", "Controller replicas holding the leader Lease (should be exactly 1).", "none",
            f"sum({cm.IS_LEADER.name}{{{CL}}})",
        ), 6, 8),
        (c.timeseries(
            "Leader per replica", "1 on the replica that holds the Lease and acts.", "bool",
            c.targets((f"max by (instance) ({cm.IS_LEADER.name}{{{CL}}})", "{{instance}}")),
        ), 18, 8),
        (c.timeseries(
            "Loop time", "p50 and p99 time of one pass of each control loop.", "s",
            c.targets(*[
                (
                    f"histogram_quantile({q}, sum by (le, loop) "
                    f"(rate({cm.RECONCILE_SECONDS.name}_bucket{{{CL}}}[$__rate_interval])))",
                    f"p{int(q * 100)} {{{{loop}}}}",
                )
                for q in (0.5, 0.99)
            ]),
        ), 12, 8),
        (c.timeseries(
            "Watch restarts", "Watch streams restarted per interval, by resource (drops, 410 relists, errors).",
            "short",
            c.targets((
                f"sum by (resource) (increase({cm.WATCH_RESTARTS_TOTAL.name}{{{CL}}}[$__rate_interval]))",
                "{{resource}}",
            )),
            bars=True,
        ), 12, 8),
        (c.timeseries(
            "Signal ages", "Age of the newest data from each input signal; stale signals make decisions hold.",
            "s",
            c.targets((f"max by (signal) ({cm.SIGNAL_AGE_SECONDS.name}{{{CL}}})", "{{signal}}")),
        ), 12, 8),
        (c.timeseries(
            "Stale signals", "1 while a signal is past its staleness limit.", "bool",
            c.targets((f"max by (signal) ({cm.SIGNAL_STALE.name}{{{CL}}})", "{{signal}}")),
        ), 12, 8),
        (c.timeseries(
            "Source errors", "Errors reading inputs per second, by source and kind.", "ops",
            c.targets((
                f"sum by (source, kind) (rate({cm.SOURCE_ERRORS_TOTAL.name}{{{CL}}}[$__rate_interval]))",
                "{{source}} {{kind}}",
            )),
        ), 12, 8),
        (c.timeseries(
            "API writes and write errors",
            "Writes to the API server per second by resource and verb, and failed writes (after retries) by kind.",
            "ops",
            c.targets(
                (
                    f"sum by (resource, verb) (rate({cm.WRITES_TOTAL.name}{{{CL}}}[$__rate_interval]))",
                    "{{resource}} {{verb}}",
                ),
                (
                    f"sum by (resource, kind) (rate({cm.WRITE_ERRORS_TOTAL.name}{{{CL}}}[$__rate_interval]))",
                    "error {{resource}} {{kind}}",
                ),
            ),
        ), 12, 8),
        (c.row("Exporters"), 24, 1),
        (c.timeseries(
            "Exporter data age",
            "Seconds since each node's exporter last collected successfully.",
            "s",
            c.targets((
                f"time() - max by (hostname) ({em.EXPORTER_LAST_SUCCESS.name}{{{NODE}}})",
                "{{hostname}}",
            )),
        ), 12, 8),
        (c.timeseries(
            "Exporter collect time", "Wall-clock time of the last collection cycle per node.", "s",
            c.targets((f"max by (hostname) ({em.EXPORTER_COLLECT_SECONDS.name}{{{NODE}}})", "{{hostname}}")),
        ), 12, 8),
        (c.timeseries(
            "Exporter source errors", "Collection errors per second by node and kind.", "ops",
            c.targets((
                f"sum by (hostname, kind) (rate({em.EXPORTER_SOURCE_ERRORS_TOTAL.name}{{{NODE}}}[$__rate_interval]))",
                "{{hostname}} {{kind}}",
            )),
        ), 12, 8),
        (c.table(
            "GPUs per node",
            "GPUs each node's exporter sees right now (a drop means a GPU fell off the bus).",
            "none",
            f"max by (hostname) ({em.EXPORTER_GPUS.name}{{{NODE}}})",
        ), 6, 8),
        (c.table(
            "PodResources up per node",
            "1 when the exporter's last kubelet PodResources List succeeded (needed for pod attribution).",
            "bool",
            f"max by (hostname) ({em.EXPORTER_POD_RESOURCES_UP.name}{{{NODE}}})",
        ), 6, 8),
    ]
    variables = [
        c.cluster_variable(em.EXPORTER_GPUS.name),
        c.query_variable("node", "Node", f'label_values({em.EXPORTER_GPUS.name}{{cluster=~"$cluster"}}, hostname)'),
    ]
    return c.dashboard(
        "queuepilot / queuepilot", UID,
        "The controller's and the exporters' own health: leader, loops, watches, signals, errors.",
        variables, panels,
    )
