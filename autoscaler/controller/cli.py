"""``queuepilot controller``: parse flags, connect to the API server, run until SIGTERM.

Start-up problems (bad flags or config file, no credentials, API server unreachable or refusing
our credentials) print ONE line to stderr and exit 2; once running, every failure is retried with
backoff and only logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

import aiohttp

from autoscaler.cluster.client import KubeConfigError, KubeError, make_api_client, probe, server_url
from autoscaler.controller.config import ConfigError, ControllerConfig, parse_config
from autoscaler.controller.loop import Controller

PROG = "queuepilot controller"
HINT = "(check --kubeconfig / in-cluster service account)"
SHUTDOWN_SECONDS = 20.0


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    return 2


def describe_connect_error(e: BaseException) -> str:
    if isinstance(e, KubeError):
        if e.status in (401, 403):
            return f"credentials rejected ({e.status} {e.reason})"
        return f"HTTP {e.status} {e.reason}".strip()
    if isinstance(e, aiohttp.ClientConnectorError):
        os_err = e.os_error
        if isinstance(os_err, ConnectionRefusedError):
            return "connection refused"
        return str(os_err.strerror or os_err) if os_err else str(e)
    if isinstance(e, TimeoutError):
        return "timed out"
    return f"{type(e).__name__}: {e}"


async def amain(config: ControllerConfig) -> int:
    try:
        api = await make_api_client(config.kubeconfig, config.context)
    except KubeConfigError as e:
        return _fail(str(e))
    try:
        try:
            await probe(api)
        except Exception as e:
            return _fail(f"cannot reach the Kubernetes API at {server_url(api)}: {describe_connect_error(e)} {HINT}")
        controller = Controller(config, api)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, controller.stop)
        try:
            await controller.start()
        except (OSError, ValueError) as e:  # a port in use, unreadable webhook certificates
            await controller.shutdown()
            return _fail(f"cannot start: {e}")
        logging.getLogger("queuepilot.controller").info(
            "serving on %s:%s as %s (leader election %s, GPU signal %s)", config.listen_host, controller.port,
            config.identity, "on" if config.leader_elect else "off", config.gpu_signal,
        )
        try:
            await controller._stop.wait()
        finally:
            try:  # bounded: a dead API server must not keep a terminating pod alive
                await asyncio.wait_for(controller.shutdown(), timeout=SHUTDOWN_SECONDS)
            except TimeoutError:
                logging.getLogger("queuepilot.controller").warning(
                    "shutdown did not finish within %ss; exiting", SHUTDOWN_SECONDS)
        return 0
    finally:
        await api.close()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as e:
        return _fail(str(e))
    if config.ray_token_file and not os.access(config.ray_token_file, os.R_OK):
        return _fail(f"cannot read --ray-token-file {config.ray_token_file}")
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        return asyncio.run(amain(config))
    except KeyboardInterrupt:
        return 0
