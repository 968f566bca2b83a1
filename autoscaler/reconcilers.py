"""Which deciders the controller runs (filled in by the decisions work: admission, scaling)."""

from __future__ import annotations

from autoscaler.reconciler import ControllerContext, Reconciler


def build_reconcilers(ctx: ControllerContext) -> list[Reconciler]:
    return []
