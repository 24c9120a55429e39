"""``kubenexus webhook`` started exactly as the shipped Deployment starts it: its container's args and env, the
shipped config.yaml, and no ``PROMETHEUS_MULTIPROC_DIR`` in the environment; /metrics must count what it answered,
and the metrics folder it made for itself goes when it is stopped."""

from __future__ import annotations

import http.client
import json
import re
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubenexus.local_webhook import KUBENEXUS, deployment_env, free_port
from tests.support.polling import wait_for
from tests.support.webhook import pod_request

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
CONFIG_MOUNT = "/etc/kubenexus/config.yaml"


def _container() -> dict[str, Any]:
    docs = yaml.safe_load_all((ROOT / "deploy" / "base" / "webhook.yaml").read_text())
    deployment = next(d for d in docs if d and d.get("kind") == "Deployment")
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "webhook")


def _request(port: int, context: ssl.SSLContext, method: str, path: str,
             body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)  # a new connection each time
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _counted(port: int, context: ssl.SSLContext) -> float:
    status, body = _request(port, context, "GET", "/metrics")
    assert status == 200
    counts = re.findall(rb'^kubenexus_webhook_requests_total\{endpoint="mutate",result="[a-z_]+"\} ([0-9.e+]+)$',
                        body, re.M)
    return sum(float(c) for c in counts)


def test_metrics_count_requests_when_started_as_the_deployment_starts_it(tmp_path, tls, apiserver, namespace):
    container = _container()
    settings = yaml.safe_load((ROOT / "deploy" / "base" / "config.yaml").read_text())
    port = free_port()
    # What the cluster provides differently here: the port is free, the certificates and the API server are local.
    settings["server"].update({"port": port, "certDir": str(Path(tls.cert).parent)})
    settings.update(kubeconfig=apiserver.write_kubeconfig(str(tmp_path / "kubeconfig")), certs={"mode": "external"})
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(settings))
    args = [str(config) if arg == CONFIG_MOUNT else arg for arg in container["args"]]
    assert str(config) in args and "--bind" not in args
    env = {k: v for k, v in deployment_env().items() if not k.startswith("KUBENEXUS_")}
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    scratch = tmp_path / "scratch"  # where the webhook makes its metrics folder, and must leave nothing behind
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    log = open(tmp_path / "webhook.log", "wb")  # noqa: SIM115 (closed below)
    process = subprocess.Popen([KUBENEXUS, *args], env=env, stdout=log, stderr=subprocess.STDOUT)
    context = ssl.create_default_context(cafile=tls.ca_cert)
    try:
        assert wait_for(lambda: _ready(port, context), timeout=60), (tmp_path / "webhook.log").read_text()
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "request": pod_request(pod, namespace)}).encode()
        before = _counted(port, context)
        for _ in range(4):  # separate connections: both workers answer some
            assert _request(port, context, "POST", "/mutate", body)[0] == 200
        assert wait_for(lambda: _counted(port, context) == before + 4, timeout=10), _counted(port, context)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
    assert [p.name for p in scratch.iterdir()] == [], "a stopped webhook left its metrics folder behind"


def _ready(port: int, context: ssl.SSLContext) -> bool:
    try:
        return _request(port, context, "GET", "/readyz")[0] == 200
    except OSError:
        return False
