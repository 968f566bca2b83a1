"""The report as one self-contained HTML file: tables and PNG plots (matplotlib, Agg) embedded as data URIs,
so it can be mailed around and opened offline."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

from report.model import Report, dash, utc_minute
from report.prom import ReportError

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
.note { color: #555; } .warn { color: #a33; } img { max-width: 100%; }
"""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ReportError("the HTML report needs matplotlib (pip install 'queuepilot[report]')") from None
    return plt


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    fig.clf()
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _e(v: object) -> str:
    return html.escape("-" if v is None else str(v))


def plots(report: Report) -> dict[str, str]:
    """Plot name -> PNG data URI."""
    plt = _pyplot()
    out: dict[str, str] = {}
    teams = report.teams[:20]
    if teams:
        fig, ax = plt.subplots(figsize=(9, 0.45 * len(teams) + 1.2))
        names = [f"{t.namespace}/{t.local_queue or '-'}" for t in teams][::-1]
        used = [t.used_gpu_hours for t in teams][::-1]
        idle = [t.idle_gpu_hours for t in teams][::-1]
        ax.barh(names, used, color="#3b7dd8", label="used")
        ax.barh(names, idle, left=used, color="#e8833a", label="idle but allocated")
        ax.set_xlabel("GPU-hours")
        ax.set_title("GPU-hours per team (ranked by idle)")
        ax.legend(loc="lower right")
        out["teams"] = _png(fig)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(9, 4))
        priced = bool(report.prices)
        for t in teams[:8]:
            points = sorted(t.timeline.items())
            xs = [(p[0] - report.end) / 86400 for p in points]
            a = [p[1][2] if priced else p[1][0] for p in points]
            u = [p[1][3] if priced else p[1][1] for p in points]
            line = ax.plot(xs, a, label=f"{t.namespace} allocated")[0]
            ax.plot(xs, u, linestyle="--", color=line.get_color(), label=f"{t.namespace} {'effective' if priced else 'used'}")
        ax.set_xlabel("days before the end of the window")
        ax.set_ylabel("USD per hour" if priced else "GPUs")
        ax.set_title("Allocated vs effective cost" if priced else "Allocated vs used GPUs")
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        out["timeline"] = _png(fig)
        plt.close(fig)
    recs = [r for r in report.recommendations if r.observed_idle_gpu_hours > 0][:15]
    if recs:
        fig, ax = plt.subplots(figsize=(9, 0.45 * len(recs) + 1.2))
        names = [f"{r.key.namespace}/{r.key.raycluster}/{r.key.group}" for r in recs][::-1]
        ax.barh(names, [r.observed_idle_gpu_hours for r in recs][::-1], color="#e8833a", label="idle GPU-hours")
        ax.barh(names, [r.saved_gpu_hours for r in recs][::-1], color="#4caf50", height=0.4,
                label="saved by the recommendation")
        ax.set_xlabel("GPU-hours")
        ax.set_title("Worker groups with the most idle GPU-hours")
        ax.legend(loc="lower right")
        out["groups"] = _png(fig)
        plt.close(fig)
    return out


def render_html(report: Report) -> str:
    title = f"GPU economics, {utc_minute(report.end - report.window_s)} to {utc_minute(report.end)}"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>",
             f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>"]
    scope = f"namespace {report.namespace}" if report.namespace else "all namespaces"
    prices = ", ".join(f"{k} = {v:g} USD/GPU-hour" for k, v in report.prices.by_key.items()) or "none (no cost computed)"
    parts.append(f"<p class='note'>Scope: {_e(scope)}. Prices: {_e(prices)}. Idle = held by a pod but not busy "
                 "(engine activity, or utilization where the GPU has no profiling field).</p>")
    if report.empty_reason:
        parts.append(f"<p><strong>No data:</strong> {_e(report.empty_reason)}</p></body></html>")
        return "".join(parts)
    imgs = plots(report)
    parts.append(f"<p class='note'>Read from {_e(report.source)}.</p>")
    parts += [f"<p class='warn'>{_e(w)}</p>" for w in report.warnings]
    parts.append("<h2>Teams</h2>")
    if "teams" in imgs:
        parts.append(f"<img alt='GPU-hours per team' src='{imgs['teams']}'>")
    head = ["namespace", "LocalQueue", "ClusterQueue", "allocated GPU-h", "used GPU-h", "idle GPU-h", "waste"]
    if report.prices:
        head += ["cost USD", "effective USD"]
    parts.append("<table><tr>" + "".join(f"<th class='{'l' if i < 3 else ''}'>{h}</th>" for i, h in enumerate(head))
                 + "</tr>")
    for t in report.teams:
        cells = [_e(t.namespace), _e(t.local_queue or "-"), _e(t.cluster_queue or "-"), dash(t.allocated_gpu_hours),
                 dash(t.used_gpu_hours), dash(t.idle_gpu_hours), dash(t.waste_ratio, "{:.0%}")]
        if report.prices:
            cells += [dash(t.cost, "{:,.0f}"), dash(t.effective_cost, "{:,.0f}")]
        parts.append("<tr>" + "".join(f"<td class='{'l' if i < 3 else ''}'>{c}</td>" for i, c in enumerate(cells))
                     + "</tr>")
    parts.append("</table>")
    if "timeline" in imgs:
        parts.append(f"<img alt='allocated vs used over time' src='{imgs['timeline']}'>")
    parts.append("<h2>Ray worker groups: what to request instead</h2>")
    if "groups" in imgs:
        parts.append(f"<img alt='worker groups by idle GPU-hours' src='{imgs['groups']}'>")
    parts.append("<table><tr><th class='l'>namespace</th><th class='l'>RayCluster</th><th class='l'>group</th>"
                 "<th>GPUs/worker</th><th>recommended</th><th>min</th><th>max</th><th>GPU-h saved</th>"
                 "<th class='l'>reason</th></tr>")
    for r in report.recommendations:
        parts.append(
            f"<tr><td class='l'>{_e(r.key.namespace)}</td><td class='l'>{_e(r.key.raycluster)}</td>"
            f"<td class='l'>{_e(r.key.group)}</td><td>{r.gpus_per_worker}</td>"
            f"<td>{_e(r.recommended_gpus_per_worker)}</td><td>{_e(r.recommended_min_replicas)}</td>"
            f"<td>{_e(r.recommended_max_replicas)}</td><td>{dash(r.saved_gpu_hours)}</td>"
            f"<td class='l'>{_e(r.reason)}: {_e(r.message)}</td></tr>")
    parts.append("</table>")
    if report.job_kinds:
        parts.append("<h2>Kueue workloads: GPUs requested vs active per pod</h2><table><tr>"
                     "<th class='l'>namespace</th><th class='l'>job kind</th><th>requested</th><th>active</th>"
                     "<th>recommended</th><th class='l'>reason</th></tr>")
        for k in report.job_kinds:
            parts.append(f"<tr><td class='l'>{_e(k.namespace)}</td><td class='l'>{_e(k.job_kind)}</td>"
                         f"<td>{_e(k.requested_gpus_per_pod)}</td><td>{_e(k.active_gpus_per_pod)}</td>"
                         f"<td>{_e(k.recommended_gpus_per_pod)}</td><td class='l'>{_e(k.reason)}: {_e(k.message)}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "".join(parts)
