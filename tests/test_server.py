"""The HTTP layer as the apiserver and Prometheus see it: TLS, status codes, probes, metrics."""

from __future__ import annotations

import http.client
import json
import re
import ssl
import subprocess

import pytest
from cryptography import x509

from cluster.stub import StubApiServer
from kubenexus.local_webhook import KUBENEXUS
from tests.support.contract import GATE, UNRESOLVED
from tests.support.polling import wait_for
from tests.support.webhook import Webhook, pod_request

pytestmark = pytest.mark.e2e

PLAIN_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}


def _mutate_count(webhook) -> float:
    status, body = webhook.request("GET", "/metrics")
    assert status == 200
    counts = re.findall(rb'kubenexus_webhook_requests_total\{endpoint="mutate",result="[a-z_]+"\} ([0-9.e+]+)', body)
    return sum(float(c) for c in counts)


def test_plain_pod_passes_unchanged(webhook, namespace):
    response, after = webhook.admit(PLAIN_POD, namespace)
    assert "patch" not in response and after == PLAIN_POD


def test_malformed_bodies_get_400_with_a_reason(webhook):
    for body, reason in ((b"{not json", b"not JSON"), (b"[]", b"not a JSON object"),
                         (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', b"expected"),
                         (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', b"request")):
        status, data = webhook.request("POST", "/mutate", body)
        assert status == 400 and reason in data, (body, data)


def test_non_create_requests_are_allowed_without_patch(webhook, namespace):
    response = webhook.review("/mutate", pod_request(PLAIN_POD, namespace, operation="DELETE"))
    assert response["allowed"] is True and "patch" not in response


def test_probes(webhook):
    assert webhook.request("GET", "/healthz") == (200, b"ok")
    status, body = webhook.request("GET", "/readyz")
    assert status == 200 and body.startswith(b"ready\n")
    assert wait_for(lambda: b"apiserver: reachable" in webhook.request("GET", "/readyz")[1], timeout=15)
    assert wait_for(lambda: _gauge(webhook, "kubenexus_webhook_apiserver_reachable") == 1.0, timeout=15)


def _gauge(webhook, name: str) -> float | None:
    status, body = webhook.request("GET", "/metrics")
    assert status == 200
    found = re.search(rb"^" + name.encode() + rb"(?:\{[^}]*\})? ([0-9.e+-]+)$", body, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_an_apiserver_outage_keeps_every_replica_ready_and_gating(workdir, tls, namespace):
    """Readiness does not follow the apiserver: an outage would otherwise take every replica out of the Service
    at once. The webhook stays ready, says why in the body and the metric, and gates pods as unresolved."""
    down = StubApiServer()
    kubeconfig = down.write_kubeconfig(str(workdir / "kubeconfig-down"))
    down.close()  # nothing listens there any more: every read is refused
    hooks = [Webhook(workdir, tls, kubeconfig, {}) for _ in range(2)]  # two replicas, both stay in the Service
    try:
        for hook in hooks:
            status, body = hook.request("GET", "/readyz")
            assert status == 200, body
            assert wait_for(lambda hook=hook: b"apiserver: not reachable" in hook.request("GET", "/readyz")[1],
                            timeout=15)
            assert wait_for(lambda hook=hook: _gauge(hook, "kubenexus_webhook_apiserver_reachable") == 0.0,
                            timeout=15)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "j-", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "uid-j", "controller": True}]},
            "spec": {"containers": [{"name": "c"}]}}
        _, after = hooks[0].admit(pod, namespace)
        assert {"name": GATE} in after["spec"]["schedulingGates"]
        assert UNRESOLVED in after["metadata"]["annotations"]
    finally:
        for hook in hooks:
            hook.stop()


def test_tls_is_at_least_1_2_and_verifies_with_the_generated_ca(webhook, tls):
    context = ssl.create_default_context(cafile=tls.ca_cert)
    conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=context, timeout=5)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    assert conn.sock.version() in ("TLSv1.2", "TLSv1.3")
    conn.close()


def test_metrics_count_every_request_across_workers(webhook, namespace, tls):
    """Requests on separate connections land on different gunicorn workers; /metrics sums them all."""
    before = _mutate_count(webhook)
    context = ssl.create_default_context(cafile=tls.ca_cert)
    for _ in range(20):
        conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=context, timeout=5)
        body = ('{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'
                + json.dumps(pod_request(PLAIN_POD, namespace)) + "}")
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 200
        conn.close()
    assert _mutate_count(webhook) - before == 20


def test_webhook_refuses_to_start_with_an_invalid_config(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("autoInject: everywhere\n")
    done = subprocess.run([KUBENEXUS, "webhook", "--config", str(config)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "autoInject" in done.stderr and "everywhere" in done.stderr


def test_metrics_show_when_the_served_certificate_expires(webhook, tls):
    """The number an alert on certificate expiry needs: the notAfter of the certificate actually served."""
    context = ssl.create_default_context(cafile=tls.ca_cert)
    conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=context, timeout=5)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read()
    peer = x509.load_der_x509_certificate(conn.sock.getpeercert(binary_form=True))
    conn.close()
    found = re.search(rb"^kubenexus_webhook_certificate_expiry_timestamp_seconds(?:\{[^}]*\})? ([0-9.e+]+)$", body,
                      re.MULTILINE)
    assert found, body.decode()[:2000]
    assert float(found.group(1)) == peer.not_valid_after_utc.timestamp()


def test_metrics_show_what_each_workers_owner_cache_holds(webhook, apiserver, namespace):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sized", "namespace": namespace, "uid": "u"},
           "spec": {"parallelism": 2}}
    apiserver.put(job)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "sized-", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "sized", "uid": "u", "controller": True}]},
        "spec": {"containers": [{"name": "c"}]}}
    webhook.admit(pod, namespace)
    status, body = webhook.request("GET", "/metrics")
    sizes = [float(v) for v in re.findall(rb'^kubenexus_webhook_owner_cache_bytes\{pid="\d+"\} (\S+)$', body,
                                          re.MULTILINE)]
    entries = [float(v) for v in re.findall(rb'^kubenexus_webhook_owner_cache_entries\{pid="\d+"\} (\S+)$', body,
                                            re.MULTILINE)]
    assert status == 200 and max(sizes) > 0 and max(entries) >= 1, body.decode()[-2000:]
