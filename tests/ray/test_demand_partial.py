"""Whether Ray's answer gave the whole of a cluster's pending work (``RayStatus.demand_partial``): the
stall detector may conclude "nothing waits" only from a whole answer.  Real HTTP through the dashboard
client, against a head answering the recorded Ray 2.60 (autoscaler v2) answers (``tests.support.ray_head``)."""

from __future__ import annotations

import time

import aiohttp
import pytest

from autoscaler.signals.ray_demand import RayDashboardClient
from tests.support.ray_head import RayHead


@pytest.mark.parametrize(("failing", "partial"), [
    (set(), False),
    ({"/api/v0/tasks"}, True),
    ({"/api/v0/actors"}, True),
    ({"/api/v0/placement_groups"}, True),
    ({"/nodes"}, False),  # node state, not pending work (its running tasks are then unknown instead)
])
async def test_a_failed_list_of_pending_work_makes_the_demand_partial(failing, partial):
    head = await RayHead(failing=failing).start()
    head.set_worker("rc-w-0", "10.1.0.1", running=0)
    try:
        async with aiohttp.ClientSession() as s:
            status = await RayDashboardClient(s).fetch_status(f"http://127.0.0.1:{head.port}", time.time())
    finally:
        await head.close()
    assert status.source == "state_api" and status.demand == ()
    assert status.demand_partial is partial
    (node,) = status.nodes
    if "/nodes" in failing:  # the state API's node list alone: no Pod name, no running tasks
        assert (node.node_ip, node.pod_name, node.running_tasks) == ("10.1.0.1", None, None)
    else:
        assert (node.node_ip, node.pod_name, node.running_tasks) == ("10.1.0.1", "rc-w-0", 0)


async def test_a_cut_short_list_makes_the_demand_partial():
    head = await RayHead().start()
    head.pending_tasks = 3
    try:
        async with aiohttp.ClientSession() as s:
            status = await RayDashboardClient(s, limit=2).fetch_status(f"http://127.0.0.1:{head.port}", time.time())
    finally:
        await head.close()
    assert status.demand_partial and sum(d.count for d in status.demand) >= 2
