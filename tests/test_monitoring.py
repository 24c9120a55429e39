"""deploy/overlays/monitoring: ServiceMonitors and a PrometheusRule for the Prometheus Operator.

Both objects are validated against the operator's CRD schemas (vendored in tests/support/schemas/), the
ServiceMonitors checked to find the components' pods and ports, the rule checked to hold the alerts
docs/operations/monitoring.md describes, and every metric an alert's expression names checked against what the two
components export: both run on the local cluster (installed from the release manifest), take some traffic, and are
scraped; an alert naming a series neither exports fails (``up`` aside: Prometheus records it for every target).
"""

from __future__ import annotations

import re
import socket
import ssl
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cluster.local import LocalCluster
from cluster.selectors import selector_from_dict
from tests.support.deploy import Installed, render
from tests.support.gang_pods import TWO_POOLS, wait_pods
from tests.support.polling import wait_for
from tests.support.roots import OPTED_IN
from tests.support.schemas import ERRORS, validate
from tools import release

pytestmark = pytest.mark.e2e

ROOT = release.ROOT
Obj = dict[str, Any]
#: Series Prometheus itself records for every scraped target (not exported by the product).
PROMETHEUS_SERIES = {"up"}
#: What the issue asks the rule to watch, beside the alerts of docs/operations/monitoring.md.
REQUIRED = {"KubeNexusWebhookDown", "KubeNexusWebhookErrors", "KubeNexusGangsStuckReleasing", "KubeNexusNoScheduler",
            "KubeNexusCertificateExpiresSoon", "KubeNexusNoControllerLeader", "KubeNexusControllerDown"}
#: The series of a metric family, by type (a counter's family name is its name without ``_total``).
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
PROMQL_WORDS = {"by", "without", "or", "and", "unless", "on", "ignoring", "group_left", "group_right", "bool",
                "offset", "inf", "nan"}


@pytest.fixture(scope="module")
def monitoring() -> list[Obj]:
    return render("deploy/overlays/monitoring")


def one(objects: list[Obj], kind: str, name: str) -> Obj:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def alerts(objects: list[Obj]) -> dict[str, str]:
    rule = one(objects, "PrometheusRule", "kubenexus-gang-admission")
    return {r["alert"]: r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]}


def metric_names(expression: str) -> set[str]:
    """The series names a PromQL expression selects: strings, label matchers, ranges and grouping labels removed,
    function names (followed by a parenthesis), keywords and numbers left out."""
    text = re.sub(r'"(\\.|[^"\\])*"', "", expression)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    words = re.findall(r"(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*(?![A-Za-z0-9_:])(?!\s*\()", text)
    return {w for w in words if w.lower() not in PROMQL_WORDS}


def test_the_objects_validate_against_the_prometheus_operator_schemas(monitoring: list[Obj]) -> None:
    assert {o["kind"] for o in monitoring} == {"Service", "ServiceMonitor", "PrometheusRule"}
    for obj in monitoring:
        validate(obj, "1.30")
    monitor = one(monitoring, "ServiceMonitor", "kubenexus-webhook")
    endpoint = monitor["spec"]["endpoints"][0]
    for broken in ({**monitor, "spec": {**monitor["spec"], "endpoints": [{**endpoint, "schema": "https"}]}},
                   {**monitor, "spec": {k: v for k, v in monitor["spec"].items() if k != "selector"}},
                   {**monitor, "spec": {**monitor["spec"], "endpoints": [{**endpoint, "interval": "soon"}]}}):
        with pytest.raises(ERRORS):
            validate(broken, "1.30")


def test_each_service_monitor_finds_its_component(monitoring: list[Obj]) -> None:
    """Each ServiceMonitor selects a Service of the installation, on a named port that reaches the container port
    serving /metrics."""
    installed = render() + monitoring
    for component, scheme in (("kubenexus-webhook", "https"), ("kubenexus-controller", "http")):
        endpoint = one(monitoring, "ServiceMonitor", component)["spec"]["endpoints"][0]
        assert endpoint["scheme"] == scheme and endpoint["path"] == "/metrics"
        selector = selector_from_dict(one(monitoring, "ServiceMonitor", component)["spec"]["selector"])
        [service] = [o for o in installed if o["kind"] == "Service"
                     and selector.matches(o["metadata"].get("labels") or {})]
        [port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
        pod = one(installed, "Deployment", component)["spec"]["template"]
        assert selector_from_dict({"matchLabels": service["spec"]["selector"]}).matches(pod["metadata"]["labels"])
        assert port["targetPort"] in [p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])]
    tls = one(monitoring, "ServiceMonitor", "kubenexus-webhook")["spec"]["endpoints"][0]["tlsConfig"]
    assert tls["ca"]["secret"] == {"name": "kubenexus-webhook-tls", "key": "ca.crt"}  # certs/store.py's CA_CRT
    assert tls["serverName"] == "kubenexus-webhook.kubenexus-system.svc"


def test_the_rule_holds_the_documented_alerts(monitoring: list[Obj]) -> None:
    page = (ROOT / "docs" / "operations" / "monitoring.md").read_text()
    documented = yaml.safe_load(page.split("```yaml\n", 1)[1].split("```", 1)[0])
    rule = alerts(monitoring)
    for alert in (r for group in documented["groups"] for r in group["rules"]):
        assert rule.get(alert["alert"]) == alert["expr"], alert["alert"]
    assert set(rule) >= REQUIRED


def test_the_metric_names_are_read_from_expressions() -> None:
    assert metric_names('sum by (endpoint) (increase(kubenexus_webhook_requests_total{result="denied"}[15m])) > 10') \
        == {"kubenexus_webhook_requests_total"}
    assert metric_names('absent(up{job="kubenexus-webhook"} == 1) or kubenexus_x:rate5m offset 5m') == \
        {"up", "kubenexus_x:rate5m"}
    assert metric_names("min(kubenexus_webhook_certificate_expiry_timestamp_seconds) - time() < 7 * 86400") == \
        {"kubenexus_webhook_certificate_expiry_timestamp_seconds"}


# --- every series an alert names is exported -------------------------------------------------------------------


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """The series names both components expose on the local cluster after some traffic: admissions (with an owner
    read), a gang released, and a client that never finishes its TLS handshake."""
    workdir = tmp_path_factory.mktemp("monitoring")
    manifest = workdir / release.VARIANTS[0].file
    manifest.write_text(release.render(release.VARIANTS[0]))
    with LocalCluster(nodes=list(TWO_POOLS), workdir=str(workdir / "cluster")) as cluster:
        cluster.run_components()
        installed = Installed(cluster, workdir)
        installed.apply(manifest)
        try:
            installed.start(server={"handshakeTimeoutSeconds": 1})
            kube = installed.kube
            ns = kube.namespace({"kubenexus.io/gang-scheduling": "enabled"})
            pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "example/w:1",
                                                            "resources": {"requests": {"cpu": "100m"}}}]}
            job = {"parallelism": 2, "completions": 2, "template": {"spec": pod}}
            kube.create(ns, {"apiVersion": "batch/v1", "kind": "Job",
                             "metadata": {"name": "w", "annotations": OPTED_IN}, "spec": job})
            wait_pods(kube, ns, lambda pods: len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods),
                      "the gang released and bound")
            with socket.create_connection(("127.0.0.1", installed.port)):  # says nothing: a handshake timeout
                wait_for(lambda: 'stage="handshake"' in webhook_metrics(installed), 10.0, "a handshake timeout")
            assert installed.controller is not None
            controller = f"http://127.0.0.1:{installed.controller.health_port}/metrics"
            texts = [webhook_metrics(installed), urllib.request.urlopen(controller, timeout=10).read().decode()]
            yield {name for text in texts for family in text_string_to_metric_families(text)
                   for name in {family.name, *(family.name + s for s in SUFFIXES.get(family.type, ())),
                                *(s.name for s in family.samples)}}
        finally:
            installed.stop()


def webhook_metrics(installed: Installed) -> str:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # a scrape by address, as Prometheus's
    return urllib.request.urlopen(f"{installed.url}/metrics", timeout=10, context=context).read().decode()


def test_every_series_an_alert_names_is_exported(monitoring: list[Obj], scraped: set[str]) -> None:
    assert any(n.startswith("kubenexus_webhook_") for n in scraped) and "kubenexus_controller_is_leader" in scraped
    missing = {alert: sorted(metric_names(expr) - scraped - PROMETHEUS_SERIES)
               for alert, expr in alerts(monitoring).items()}
    assert not {a: m for a, m in missing.items() if m}, missing
    # and the check fails on a name nothing exports
    typo = "kubenexus_webhook_requests_totl"
    assert metric_names(f"rate({typo}[5m]) > 0") - scraped == {typo}
