"""``queuepilot report`` against the real Prometheus holding two weeks of known history, and its failures."""

from __future__ import annotations

import base64
import http.server
import json
import math
import re
import threading
from collections.abc import Iterator

import pytest

from alerts import economics as ec
from report import cli, model
from tests.economics import world
from tests.support.ports import free_port
from tests.support.prometheus import run_prometheus

WEEK = 7 * 86400
PRICE_ARGS = [a for k, v in world.PRICES.items() for a in ("--price", f"{k}={v}")]


@pytest.fixture(scope="module")
def weekly(backfilled, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("report") / "report.json"
    rc = cli.main(["--prometheus-url", backfilled.prom.url, "--window", "7d", "--end", str(backfilled.end),
                   *PRICE_ARGS, "--json", str(out)])
    assert rc == cli.EXIT_OK
    return json.loads(out.read_text())


def test_html_report_with_embedded_plots(backfilled, tmp_path):
    out = tmp_path / "r.html"
    rc = cli.main(["--prometheus-url", backfilled.prom.url, "--window", "7d", "--end", str(backfilled.end),
                   *PRICE_ARGS, "--html", str(out)])
    assert rc == cli.EXIT_OK
    text = out.read_text()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", text)
    assert len(images) == 3
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
    for needle in ("team-a", "rc-tune", "rc-notebooks", "PyTorchJob", "effective USD"):
        assert needle in text
    assert "http" not in text.split("<body>", 1)[1]  # nothing fetched from elsewhere


def test_the_report_reads_the_names_the_rules_write():
    assert (model.GPU_BUSY, model.POD_ALLOCATED, model.POD_ACTIVE) == (ec.GPU_BUSY, ec.POD_ALLOCATED, ec.POD_ACTIVE)
    assert model.DEFAULT_PRICE_KEY == ec.DEFAULT_PRICE_KEY


def test_contract_keys(weekly):
    assert {"window_s", "teams", "recommendations"} <= set(weekly)
    assert weekly["window_s"] == WEEK and weekly["step_s"] == world.STEP  # the rules' interval
    team_keys = {"namespace", "local_queue", "cluster_queue", "allocated_gpu_hours", "used_gpu_hours",
                 "idle_gpu_hours", "waste_ratio", "cost", "effective_cost"}
    rec_keys = {"namespace", "raycluster", "group", "gpus_per_worker", "recommended_gpus_per_worker",
                "recommended_min_replicas", "recommended_max_replicas", "idle_gpu_hours", "reason"}
    assert all(team_keys <= set(t) for t in weekly["teams"])
    # the rules were backfilled over the whole history: every number is theirs, and the report says so
    assert weekly["source"] == "the economics recording rules" and weekly["raw_series_share"] == 0.0
    assert weekly["warnings"] == []
    assert all(rec_keys <= set(r) for r in weekly["recommendations"])


def test_team_numbers(weekly, backfilled):
    got = {t["namespace"]: t for t in weekly["teams"]}
    assert set(got) == {"team-a", "team-b", "team-c"}
    for ns, t in got.items():
        expect = world.expected_team(ns, backfilled.end, WEEK)
        for key, value in expect.items():
            assert t[key] == pytest.approx(value, rel=1e-9), (ns, key)
        assert t["unpriced_gpu_hours"] == 0
    assert (got["team-a"]["local_queue"], got["team-a"]["cluster_queue"]) == ("lq-a", "cq-a")
    # ranked by idle GPU-hours
    idle = [t["idle_gpu_hours"] for t in weekly["teams"]]
    assert idle == sorted(idle, reverse=True)


def test_worker_group_recommendations(weekly, backfilled):
    recs = {r["raycluster"]: r for r in weekly["recommendations"]}
    steps = world.window_steps(backfilled.end, WEEK)
    hours = world.STEP / 3600
    a = recs["rc-tune"]
    # 3 workers keep 4 of their 8 GPUs busy: 4 GPUs each, replicas stay at 3 (+15 % margin on the max)
    assert (a["gpus_per_worker"], a["recommended_gpus_per_worker"]) == (8, 4)
    assert (a["recommended_min_replicas"], a["recommended_max_replicas"]) == (3, math.ceil(3 * 1.15))
    assert a["idle_gpu_hours"] == pytest.approx(len(steps) * hours * 3 * 4)
    assert a["reason"] == "Recommended"
    c = recs["rc-notebooks"]
    # idle at night: nobody busy, so the group could have gone to 0 and saved all 8 GPUs each night
    nights = sum(1 for t in steps if not world.is_day(t))
    assert (c["gpus_per_worker"], c["recommended_gpus_per_worker"]) == (2, 2)
    assert (c["recommended_min_replicas"], c["recommended_max_replicas"]) == (0, math.ceil(4 * 1.15))
    assert c["idle_gpu_hours"] == pytest.approx(nights * hours * 8)
    assert c["observed_idle_gpu_hours"] == pytest.approx(nights * hours * 8)
    # the PyTorchJob keeps all it asked for busy
    [job] = weekly["job_kinds"]
    assert (job["namespace"], job["job_kind"], job["requested_gpus_per_pod"], job["recommended_gpus_per_pod"]) == (
        "team-b", "PyTorchJob", 4, 4)
    assert job["reason"] == "AlreadyRightSized"


def test_namespace_filter_and_no_prices(backfilled, tmp_path):
    out = tmp_path / "b.json"
    rc = cli.main(["--prometheus-url", backfilled.prom.url, "--window", "2d", "--end", str(backfilled.end),
                   "--namespace", "team-b", "--json", str(out)])
    assert rc == cli.EXIT_OK
    doc = json.loads(out.read_text())
    [team] = doc["teams"]
    assert team["namespace"] == "team-b" and team["cost"] is None and team["effective_cost"] is None
    assert team["allocated_gpu_hours"] == pytest.approx(8 * 48) and team["waste_ratio"] == pytest.approx(0.1)
    assert doc["recommendations"] == []


def test_short_window_withholds_recommendations(backfilled, tmp_path):
    out = tmp_path / "short.json"
    assert cli.main(["--prometheus-url", backfilled.prom.url, "--window", "6h", "--end", str(backfilled.end),
                     "--json", str(out)]) == cli.EXIT_OK
    recs = json.loads(out.read_text())["recommendations"]
    assert {r["reason"] for r in recs} == {"InsufficientHistory"}
    assert all(r["recommended_gpus_per_worker"] is None for r in recs)


def test_window_without_data_writes_an_empty_report_that_says_why(backfilled, tmp_path, capsys):
    out = tmp_path / "empty.json"
    rc = cli.main(["--prometheus-url", backfilled.prom.url, "--window", "7d",
                   "--end", str(backfilled.end - 30 * 86400), "--json", str(out)])
    assert rc == cli.EXIT_NO_DATA
    doc = json.loads(out.read_text())
    assert doc["teams"] == [] and doc["recommendations"] == []
    assert "no GPU was held" in doc["empty_reason"]
    assert "no data" in capsys.readouterr().err


def test_prometheus_without_history(tmp_path, capsys):
    with run_prometheus(tmp_path / "bare") as prom:
        rc = cli.main(["--prometheus-url", prom.url, "--json", str(tmp_path / "r.json")])
    assert rc == cli.EXIT_NO_DATA
    assert "pod_gpu:queuepilot_gpu_busy:ratio" in json.loads((tmp_path / "r.json").read_text())["empty_reason"]


@pytest.fixture
def not_prometheus() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>Grafana login</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("url", "rc", "message"),
    [
        ("prometheus:9090", cli.EXIT_USAGE, "must be an http:// or https:// URL"),
        ("http://127.0.0.1:{closed}", cli.EXIT_PROMETHEUS, "cannot reach Prometheus"),
        ("{html}", cli.EXIT_PROMETHEUS, "did not answer like a Prometheus API (HTTP 200, text/html)"),
    ],
)
def test_one_clear_line_on_failure(url, rc, message, not_prometheus, capsys):
    url = url.format(closed=free_port(), html=not_prometheus)
    assert cli.main(["--prometheus-url", url]) == rc
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("queuepilot report: ")


@pytest.mark.parametrize("args", [["--window", "7x"], ["--price", "h100"], ["--price", "h100=cheap"],
                                  ["--price", "h100=-1"], ["--step", "0"],
                                  ["--namespace", 'a"} or vector(1']])
def test_bad_arguments(args, capsys):
    assert cli.main(["--prometheus-url", "http://127.0.0.1:9", *args]) == cli.EXIT_USAGE
    assert capsys.readouterr().err.startswith("queuepilot report: ")
