"""The small helpers: listen addresses, flag defaults from the environment, argparse types, error
kinds, throttled logs."""

from __future__ import annotations

import argparse
import logging

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from servicekit.argtypes import count, non_negative_seconds, positive_seconds
from servicekit.envflags import EnvError, HelpFormatter, apply_env, parse_bool
from servicekit.errors import KINDS, error_kind, status_kind
from servicekit.listen import ListenAddress, listen_arg, parse_listen
from servicekit.logthrottle import ProblemLog, ThrottledLog


# ---------------------------------------------------------------------------------------- listen
@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9400", ("127.0.0.1", 9400)),
    (":9400", ("0.0.0.0", 9400)),
    ("[::1]:0", ("::1", 0)),
    ("[::]:8080", ("::", 8080)),
    ("node-a.example:65535", ("node-a.example", 65535)),
])
def test_listen_addresses(text, expected):
    assert parse_listen(text) == expected
    assert parse_listen(str(parse_listen(text))) == expected  # str() round-trips


@pytest.mark.parametrize(("text", "message"), [
    ("9400", "must be HOST:PORT"), ("host:", "must be HOST:PORT"), ("host:http", "must be HOST:PORT"),
    ("h:70000", "port 0-65535"), ("::1:80", "brackets"), ("[::1:80", "brackets"), ("a b:80", "not a host"),
    ("h:-1", "must be HOST:PORT"),
])
def test_bad_listen_addresses_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse_listen(text)
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        listen_arg(text)


def test_listen_urls_use_loopback_for_wildcards():
    assert ListenAddress("0.0.0.0", 1).url(port=9400) == "http://127.0.0.1:9400"
    assert ListenAddress("::", 1).url("https", 9443) == "https://[::1]:9443"
    assert ListenAddress("10.0.0.5", 80).url() == "http://10.0.0.5:80"


# ---------------------------------------------------------------------------------------- envflags
@pytest.mark.parametrize("word", ["1", "true", "TRUE", " yes ", "on", "On"])
def test_true_words(word):
    assert parse_bool(word) is True


@pytest.mark.parametrize("word", ["0", "false", "False", "no", "off", " OFF "])
def test_false_words(word):
    assert parse_bool(word) is False


@pytest.mark.parametrize("word", ["", "2", "maybe", "nein", "truee"])
def test_other_words_are_errors(word):
    with pytest.raises(ValueError, match="not a boolean"):
        parse_bool(word)


def demo_like_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(formatter_class=HelpFormatter)
    p.add_argument("--no-tui", action="store_true", help="plain output")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--color", action="store_false", dest="plain", help="colour")
    p.add_argument("--dry-run", action=argparse.BooleanOptionalAction, default=False, help="no writes")
    p.add_argument("--speed", type=positive_seconds, default=60.0, help="speed")
    p.add_argument("--nodes", type=count(1), default=4, help="nodes")
    p.add_argument("--mode", choices=("a", "b"), default="a", help="mode")
    p.add_argument("--name", default="x", help="name")
    return p


def test_booleans_from_the_environment_mean_what_they_say():
    # the old bug: QUEUEPILOT_NO_TUI=false turned the live view off, QUEUEPILOT_NO_PROGRESS=0 counted as true
    p = demo_like_parser()
    apply_env(p, {"QUEUEPILOT_NO_TUI": "false", "QUEUEPILOT_NO_PROGRESS": "0", "QUEUEPILOT_DRY_RUN": "yes",
                  "QUEUEPILOT_COLOR": "off"})
    ns = p.parse_args([])
    assert (ns.no_tui, ns.no_progress, ns.dry_run, ns.plain) == (False, False, True, True)
    p = demo_like_parser()
    apply_env(p, {"QUEUEPILOT_NO_TUI": "1", "QUEUEPILOT_NO_PROGRESS": "true"})
    ns = p.parse_args([])
    assert (ns.no_tui, ns.no_progress) == (True, True)
    assert p.parse_args(["--no-dry-run"]).dry_run is False  # the flag wins


def test_values_are_converted_and_checked_by_the_flag_itself():
    p = demo_like_parser()
    used = apply_env(p, {"QUEUEPILOT_SPEED": "2.5", "QUEUEPILOT_NODES": "8", "QUEUEPILOT_MODE": "b",
                         "QUEUEPILOT_NAME": "n", "UNRELATED": "1"})
    assert vars(p.parse_args([])) == {"no_tui": False, "no_progress": False, "plain": True, "dry_run": False,
                                      "speed": 2.5, "nodes": 8, "mode": "b", "name": "n"}
    assert used == {"speed": "QUEUEPILOT_SPEED", "nodes": "QUEUEPILOT_NODES", "mode": "QUEUEPILOT_MODE",
                    "name": "QUEUEPILOT_NAME"}
    assert p.parse_args(["--nodes", "2"]).nodes == 2


@pytest.mark.parametrize(("env", "message"), [
    ({"QUEUEPILOT_NO_TUI": "nope"}, "QUEUEPILOT_NO_TUI: 'nope' is not a boolean"),
    ({"QUEUEPILOT_SPEED": "-1"}, "QUEUEPILOT_SPEED='-1': must be > 0 seconds"),
    ({"QUEUEPILOT_SPEED": "nan"}, "must be a finite number"),
    ({"QUEUEPILOT_NODES": "0"}, "QUEUEPILOT_NODES='0': must be >= 1"),
    ({"QUEUEPILOT_MODE": "c"}, "QUEUEPILOT_MODE='c': choose from a, b"),
])
def test_bad_environment_values_are_one_clear_error(env, message):
    with pytest.raises(EnvError) as e:
        apply_env(demo_like_parser(), env)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_aliases_skip_and_help(capsys):
    p = argparse.ArgumentParser(formatter_class=HelpFormatter)
    p.add_argument("--node-name", default="h", help="node")
    p.add_argument("--check", action="store_true", help="check")
    apply_env(p, {"NODE_NAME": "a", "QUEUEPILOT_NODE_NAME": "b", "QUEUEPILOT_CHECK": "1"},
              aliases={"node_name": ("NODE_NAME", "QUEUEPILOT_NODE_NAME")}, skip=("check",))
    ns = p.parse_args([])
    assert (ns.node_name, ns.check) == ("a", False)
    p.print_help()
    out = " ".join(capsys.readouterr().out.split())
    assert "node [env NODE_NAME, QUEUEPILOT_NODE_NAME] (default: a)" in out
    assert "check (default: False)" in out


def test_argtypes():
    assert positive_seconds("0.5") == 0.5 and non_negative_seconds("0") == 0.0 and count(0)("0") == 0
    for parse, bad in ((positive_seconds, "0"), (positive_seconds, "inf"), (positive_seconds, "x"),
                       (non_negative_seconds, "-1"), (count(1), "0"), (count(1, 9), "10"), (count(), "1.5")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


# ---------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(("status", "kind"), [
    (409, "conflict"), (410, "gone"), (400, "invalid"), (422, "invalid"), (401, "forbidden"), (403, "forbidden"),
    (404, "not_found"), (429, "throttled"), (500, "server"), (503, "server"), (418, "client"), (200, "bad_response"),
])
def test_status_kinds(status, kind):
    assert status_kind(status) == kind
    assert error_kind(ApiException(status=status)) == kind


async def test_exception_kinds_from_real_failures():
    assert error_kind(TimeoutError()) == "timeout"
    assert error_kind(ConnectionRefusedError()) == "connection"
    assert error_kind(ValueError("bad json")) == "bad_response"
    assert error_kind(KeyError("x")) == "bad_response"
    assert error_kind(RuntimeError("?")) == "other"
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientError) as e:
            await s.get("http://127.0.0.1:1/")
    assert error_kind(e.value) == "connection"
    assert error_kind(aiohttp.ServerDisconnectedError()) == "connection"
    assert {error_kind(x) for x in (TimeoutError(), OSError(), ValueError(), RuntimeError(), ApiException(status=1))} \
        <= set(KINDS)


# ---------------------------------------------------------------------------------------- logs
class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_throttled_log_counts_what_it_holds_back(caplog):
    clock = Clock()
    tl = ThrottledLog(logging.getLogger("t"), interval=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="t"):
        assert tl.log("k", logging.WARNING, "bad %s", 1)
        for _ in range(50):
            clock.t += 1
            assert not tl.log("k", logging.WARNING, "bad %s", 2)
        assert tl.log("other", logging.WARNING, "other")  # keys are independent
        clock.t += 20
        assert tl.log("k", logging.WARNING, "bad %s", 3)
    assert [r.getMessage() for r in caplog.records] == [
        "bad 1", "other", "bad 3 (50 more like this in the last 60s not logged)"]


def test_problem_log_logs_start_change_backoff_and_recovery(caplog):
    clock = Clock()
    pl = ProblemLog(logging.getLogger("p"), "GPU signal from Prometheus http://p:9090", first_repeat=60,
                    max_repeat=240, clock=clock)
    written = []
    with caplog.at_level(logging.INFO, logger="p"):
        for _ in range(40):  # every 15 s for 10 minutes
            written.append(pl.failing("connection", "cannot connect (Connection refused)"))
            clock.t += 15
        assert pl.problem == "connection" and pl.failures == 40
        assert pl.failing("not_found", "HTTP 404")  # a different problem: logged at once
        clock.t += 15
        assert pl.ok() and not pl.ok()
    # logged at 0 s, then 60, 120 and 240 s (the cap) later: 4 lines in 10 minutes, not 40
    assert sum(written) == 4
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs[0] == "GPU signal from Prometheus http://p:9090: cannot connect (Connection refused) (connection)"
    assert "still failing after" in msgs[1] and "HTTP 404 (not_found); the problem changed" in msgs[-2]
    assert msgs[-1].startswith("GPU signal from Prometheus http://p:9090: recovered after 41 failed attempts")
