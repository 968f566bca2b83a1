"""``queuepilot controller``: parse flags, connect to the API server, run until SIGTERM.

Start-up problems (bad flags, environment values or config file, malformed kubeconfig, no
credentials, API server unreachable or refusing our credentials) print ONE line to stderr and exit
2; once running, every failure is retried with backoff and only logged.  The first log line says
what is running: live or dry-run, leader election, the GPU signal, the AdmissionCheck controller
name.  ``--check-config`` stops after the offline checks (flags, config file, kubeconfig) with a
summary on stdout: exit status 0 when all is valid, 2 otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

import aiohttp

from autoscaler.cluster.client import (
    KubeConfigError,
    KubeError,
    check_kubeconfig,
    credentials_source,
    make_api_client,
    probe,
    server_url,
)
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
            "started against %s, metrics on %s:%s: %s", server_url(api), config.listen_host, controller.port,
            config.describe(),
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


def check_config(config: ControllerConfig) -> int:
    """``--check-config``: the offline checks that ``parse_config`` has not done (the token file, the
    kubeconfig); a summary on stdout, exit status 0, or one line on stderr and 2."""
    if config.ray_token_file and not os.access(config.ray_token_file, os.R_OK):
        return _fail(f"cannot read --ray-token-file {config.ray_token_file}")
    if config.ray_ca_file and not os.access(config.ray_ca_file, os.R_OK):
        return _fail(f"cannot read --ray-ca-file {config.ray_ca_file}")
    source, path = credentials_source(config.kubeconfig)
    if source == "kubeconfig":
        assert path is not None
        try:
            credentials = f"kubeconfig {path} ({check_kubeconfig(path, config.context)})"
        except KubeConfigError as e:
            return _fail(str(e))
    elif source == "in-cluster":
        credentials = "the in-cluster service account"
    else:
        credentials = "none found here (at run time: the in-cluster service account or --kubeconfig)"
    print(f"{PROG}: configuration valid: {config.describe()}; credentials: {credentials}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as e:
        return _fail(str(e))
    if config.check_config:
        return check_config(config)
    if config.ray_token_file and not os.access(config.ray_token_file, os.R_OK):
        return _fail(f"cannot read --ray-token-file {config.ray_token_file}")
    if config.ray_ca_file and not os.access(config.ray_ca_file, os.R_OK):
        return _fail(f"cannot read --ray-ca-file {config.ray_ca_file}")
    logging.basicConfig(
        level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        return asyncio.run(amain(config))
    except KeyboardInterrupt:
        return 0
