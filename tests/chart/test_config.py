"""What the chart hands the programs is what the programs accept: the --config file through the real
policy parsers, the container args through the real argument parsers, the schema's config keys
against the policy dataclasses."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from autoscaler.controller import config as controller_config
from autoscaler.core.policy.config import AdmissionConfig, ScalingDefaults, admission_config, scaling_defaults
from autoscaler.core.policy.stall import StallConfig, stall_config
from autoscaler.webhook.server import webhook_settings
from exporter import cli as exporter_cli
from tests.chart.combos import COMBOS
from tests.chart.helm import CHART, MAPPING, render

pytestmark = pytest.mark.e2e

# flags the controller engineer adds for the webhook (autoscaler/webhook/server.py start_webhook)
WEBHOOK_FLAGS = ("--webhook-listen", "--webhook-cert-dir")


def _config(r) -> dict:
    cm = r.one("ConfigMap", "-controller-config")
    return yaml.safe_load(cm["data"]["config.yaml"])


def test_rendered_config_parses_with_the_policy_parsers() -> None:
    settings = _config(render("helm3", MAPPING))
    adm = admission_config(settings)
    sc = scaling_defaults(settings)
    wh = webhook_settings(settings)
    assert adm.stale_signal_mode == "fail-open" and adm.retry_backoff_cap_seconds == 900
    assert sc.idle_window_seconds == 90 and sc.pressured_idle_window_seconds == 60
    assert sc.target_gpu_utilization == 0.7 and sc.reclaim_budget_per_hour == 4 and not sc.keep_spare_for_target
    assert (sc.reclaim_window_seconds, sc.reclaim_grace_seconds, sc.down_after_up_seconds) == (300, 600, 300)
    # the chart's defaults are the controller's own (an operator reading either sees the same numbers)
    assert sc == ScalingDefaults()
    st = stall_config(settings)
    assert st == StallConfig() and st.enabled and st.window_seconds == 1800 and st.gpu_utilization == 0.05
    assert st.deactivate_after_seconds == 7200  # report at 30m, deactivate (opted in) at 2h
    assert st.deactivate_cluster_queues == () and st.deactivate_namespaces == ()  # deactivation is opt-in
    assert dict(wh.namespace_queues) == {"team-a": "team-a-queue", "team-b": "team-b-lq"}
    # a value set through the chart reaches the policy
    settings = _config(render("helm3", ("config.admission.stale_signal_mode=hold", "config.scaling.idle_window=30m")))
    assert admission_config(settings).stale_signal_mode == "hold"
    assert scaling_defaults(settings).idle_window_seconds == 1800
    # time windows: none by default (safe on a shared cluster); a ClusterQueue's schedule set through the
    # chart reaches the policy parsed, and a malformed one stops the controller naming the ClusterQueue
    assert sc.cluster_queue_schedules == {}
    night = "Mon-Thu 20:00-08:00 max=2 name=night; Fri 20:00-Mon 08:00 max=2 name=weekend; tz=Europe/Berlin"
    sched = scaling_defaults(_config(render("helm3", (f"config.scaling.cluster_queue_schedules.cq-a={night}",))))
    (only,) = sched.cluster_queue_schedules.items()
    assert only[0] == "cq-a" and only[1].zone == "Europe/Berlin"
    assert [(w.name, w.max_workers) for w in only[1].windows] == [("night", 2), ("weekend", 2)]
    bad = _config(render("helm3", ("config.scaling.cluster_queue_schedules.cq-a=Mon-Fri 20:00-08:00",)))
    with pytest.raises(ValueError, match=r"config scaling\.cluster_queue_schedules: cq-a: .*min=N\|max=N"):
        scaling_defaults(bad)
    settings = _config(render("helm3", ("config.stall.deactivate_cluster_queues={cq-a,cq-b}", "config.stall.window=1h",
                                        "config.stall.deactivate_after=4h")))
    st = stall_config(settings)
    assert st.deactivate_cluster_queues == ("cq-a", "cq-b") and st.window_seconds == 3600
    assert st.deactivate_after_seconds == 4 * 3600
    # a delay under the window passes the schema (it cannot compare durations) but not the controller
    settings = _config(render("helm3", ("config.stall.window=3h",)))
    with pytest.raises(ValueError, match=r"stall\.deactivate_after \(2h\) must be at least stall\.window \(3h\)"):
        stall_config(settings)


@pytest.mark.parametrize(("section", "cls"), [("admission", AdmissionConfig), ("scaling", ScalingDefaults),
                                              ("stall", StallConfig)])
def test_schema_config_keys_are_the_policy_fields(section: str, cls: type) -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    keys = set(schema["properties"]["config"]["properties"][section]["properties"])
    fields = {f.name for f in dataclasses.fields(cls)}
    # each schema key is a field, or a *_seconds field named without the suffix (a duration string)
    unknown = {k for k in keys if k not in fields and k + "_seconds" not in fields}
    assert not unknown, f"schema config.{section} keys the controller would reject: {sorted(unknown)}"
    missing = {f for f in fields if f not in keys}
    assert not missing, f"policy fields the schema does not allow: {sorted(missing)}"
    # and every key the schema allows is accepted by the real parser with a representative value
    values = {"admission": {"stale_signal_mode": "hold", "max_retries": 3, "check_cpu_memory": False,
                            "controller_name": "queuepilot.io/gpu-capacity"},
              "scaling": {"tolerance": 0.1, "scale_up": "Pods:2:60", "scale_down": "Percent:50:60",
                          "reclaim_idle_actors": True, "reclaim_budget_per_hour": 4, "keep_spare_for_target": True,
                          "reclaim_replace": True,
                          # at most the idle window (90 s by default)
                          "pressured_idle_window": "30s", "pressured_idle_window_seconds": 30,
                          "cluster_queue_schedules": {"cq-a": "Sat,Sun 00:00-24:00 max=0"}},
              "stall": {"enabled": False, "deactivate_cluster_queues": ["x"], "deactivate_namespaces": ["x"],
                        # at least the window (30 min by default)
                        "deactivate_after": "3h", "deactivate_after_seconds": 10800,
                        "deactivate_serving": True, "without_ray_signal": "deactivate",
                        "reactivated": "deactivate", "remember_owners": "6h", "remember_owners_seconds": 0}}[section]
    parse = {"admission": admission_config, "scaling": scaling_defaults, "stall": stall_config}[section]
    for k in sorted(keys):
        if k in values:
            v = values[k]
        elif "utilization" in k:
            v = 0.5
        else:
            v = "5m" if not k.endswith("_seconds") else 300
        parse({section: {k: v}})


@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_controller_args_parse(combo: str, tmp_path: Path) -> None:
    c = COMBOS[combo]
    r = render("helm3", c.sets, c.api_versions)
    args = r.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "controller"
    # the mounted ConfigMap, as the pod sees it
    config_file = tmp_path / "config.yaml"
    config_file.write_text(r.one("ConfigMap", "-controller-config")["data"]["config.yaml"])
    assert "--config=/etc/queuepilot/config/config.yaml" in args
    args = [f"--config={config_file}" if a.startswith("--config=") else a for a in args]
    known = {o for a in controller_config.build_parser()._actions for o in a.option_strings}
    # the webhook flags are checked by name until the controller's parser has them; once it has any
    # webhook flag, it must have exactly the ones the chart passes
    if any(o.startswith("--webhook") for o in known):
        assert set(WEBHOOK_FLAGS) <= known, f"controller webhook flags {sorted(o for o in known if 'webhook' in o)}"
    rest = [a for a in args[1:] if a.split("=", 1)[0] not in WEBHOOK_FLAGS or a.split("=", 1)[0] in known]
    cfg = controller_config.parse_config(rest, env={"POD_NAME": "p", "POD_NAMESPACE": "ns"})
    assert cfg.listen_port == 8080
    assert cfg.leader_elect is ("--no-leader-elect" not in args)
    assert cfg.dry_run is ("--dry-run" in args)
    assert cfg.multikueue_dispatcher is ("--multikueue-dispatcher" in args)
    if combo == "multikueue-dispatcher":
        assert (cfg.multikueue_namespace, cfg.multikueue_cluster_label) == ("kueue", "k8s_cluster")
    assert cfg.settings == _config(r)


@pytest.mark.parametrize("combo", sorted(k for k in COMBOS if k != "exporter-off"))
def test_exporter_args_parse(combo: str) -> None:
    c = COMBOS[combo]
    args = render("helm3", c.sets, c.api_versions).one("DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "exporter"
    ns = exporter_cli.build_parser().parse_args(args[1:])
    assert ns.source in ("nvml", "dcgm") and str(ns.listen) == "0.0.0.0:9400"
