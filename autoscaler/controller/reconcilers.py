"""Which deciders the controller runs: the GPU-capacity admission check and the worker-group scaler.

Both share one ``EventSink`` (one background Event sender).  Each keeps its state between passes
in memory: the admission reconciler its reservation ledger and retry counts (rebuilt from the
cluster when it (re)gains leadership), the scaler each group's recommendation window, scale
events and idle timers (lost on restart: the scaler then starts with empty windows, so the first
scale-down waits a full idle window again — the safe direction).
"""

from __future__ import annotations

from autoscaler.act.events import EventSink
from autoscaler.controller.admission import AdmissionReconciler
from autoscaler.controller.context import ControllerContext, Reconciler
from autoscaler.controller.scaling import ScalingReconciler


def build_reconcilers(ctx: ControllerContext) -> list[Reconciler]:
    events = EventSink(ctx.api_client, ctx.counters, dry_run=ctx.dry_run)
    return [AdmissionReconciler(ctx, events), ScalingReconciler(ctx, events)]
