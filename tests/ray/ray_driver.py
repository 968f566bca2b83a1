"""Driver run as a subprocess by the live-head tests: connects to the head, submits demand.

Usage: ``python ray_driver.py <gcs_address>`` (auth from ``RAY_AUTH_MODE``/``RAY_AUTH_TOKEN``).
The head has 2 CPUs and 2 GPUs (``--num-gpus=2``: Ray believes it without a device).  Prints
one JSON line (``{"ready": true, ...}``) once everything is submitted, then keeps the work alive
(a driver's tasks, actors and placement groups die with it) until stdin closes.
"""

from __future__ import annotations

import json
import os
import sys
import time

import ray
from ray.autoscaler.sdk import request_resources
from ray.util.placement_group import placement_group


@ray.remote(num_cpus=0, num_gpus=1)
def gpu_task(hold: float) -> None:
    time.sleep(hold)


@ray.remote(num_cpus=0, num_gpus=1)
class GpuActor:
    def ping(self) -> str:
        return "pong"


def main() -> int:
    ray.init(address=sys.argv[1], namespace="queuepilot-test", log_to_driver=False)
    # 2 tasks take both GPUs; 3 more wait for them (NO_RESOURCES)
    running = [gpu_task.options(name=f"gpu_task_{i}").remote(600) for i in range(2)]
    deadline = time.time() + 60
    while ray.available_resources().get("GPU", 0) > 0 and time.time() < deadline:
        time.sleep(0.1)
    pending = [gpu_task.options(name=f"gpu_task_{i}").remote(600) for i in range(2, 5)]
    # no node can ever hold 4 GPUs, and no node carries the label a pinned task asks for
    too_big = gpu_task.options(name="too_big", num_gpus=4).remote(0)
    pinned = gpu_task.options(name="pinned", label_selector={"ray.io/node-group": "gpu-workers"}).remote(0)
    actor = GpuActor.options(name="gpu_actor").remote()
    pg_wait = placement_group([{"GPU": 1}] * 2, strategy="STRICT_PACK", name="pg_wait")
    pg_never = placement_group([{"GPU": 4, "CPU": 1}], strategy="PACK", name="pg_never")
    request_resources(bundles=[{"GPU": 1}] * 3)
    keep = (running, pending, too_big, pinned, actor, pg_wait, pg_never)
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    sys.stdin.read()  # until the test closes our stdin
    del keep
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
