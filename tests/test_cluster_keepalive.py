"""The apiserver's webhook client and kept-alive connections, as Go's ``http.Transport`` in the real apiserver
treats them: a connection the webhook closed while idle is not reused, a request that failed with nothing written
is sent again once, a POST that went out is not. Against the real ``kubenexus webhook`` (gunicorn gthread, with a
short ``server.keepAliveSeconds``) and against scripted servers for the failures gunicorn does not produce."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from cluster import admission
from cluster.local import LocalCluster
from kubenexus.local_webhook import webhook_configuration
from tests.support.contract import GATE, GROUP, MIN
from tests.support.webhook import Webhook

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster():
    """A cluster of its own: no other mutating webhook may gate the test pods (or reinvoke ours)."""
    with LocalCluster() as running:
        yield running

KEEP_ALIVE = 1  # seconds; the shipped webhook keeps idle connections 75 s


@pytest.fixture(scope="module")
def short_keep_alive(cluster, workdir, tls):
    """A second ``kubenexus webhook`` that closes kept-alive connections after ``KEEP_ALIVE`` idle seconds."""
    kubeconfig = cluster.add_user("system:serviceaccount:kubenexus-system:kubenexus-webhook")
    hook = Webhook(workdir, tls, kubeconfig, {"server": {"certDir": str(Path(tls.cert).parent),
                                                         "keepAliveSeconds": KEEP_ALIVE}})
    yield hook
    hook.stop()


def _wait_until_idle_connections_closed(hook: Webhook) -> None:
    """Make a request of our own after the apiserver's, leave the connection idle and wait until the webhook closes
    it: gunicorn closes expired keep-alive connections oldest first, so the apiserver's is closed by then."""
    conn = http.client.HTTPSConnection("127.0.0.1", hook.port, context=hook.context, timeout=KEEP_ALIVE + 15)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().read()
        assert conn.sock.recv(1) == b""  # EOF: the server closed it (a timeout here fails the test)
    finally:
        conn.close()


def _gang_pod(name: str, label: str, value: str) -> dict:
    """A pod with explicit gang labels: the webhook gates it, so a skipped call shows as a pod without the gate."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {label: value, GROUP: name, MIN: "1"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_admission_succeeds_on_a_connection_the_webhook_closed_while_idle(cluster, short_keep_alive, tls, policy):
    """The reported failure: a kept-alive connection the webhook closed after its keep-alive made the next
    admission fail (500 under Fail, the webhook silently skipped under Ignore). The apiserver's transport
    notices the close while the connection idles and dials a new one."""
    name = f"idle-{policy.lower()}"
    kube = config.new_client_from_config(cluster.kubeconfig)  # one client: one apiserver connection and thread
    client.AdmissionregistrationV1Api(kube).create_mutating_webhook_configuration(webhook_configuration(
        "Mutating", name, f"{short_keep_alive.url}/mutate", tls.ca_bundle_b64(), failure_policy=policy,
        object_selector={"matchLabels": {"idle-test": policy}}))
    core = client.CoreV1Api(kube)
    for attempt in range(2):
        pod = core.create_namespaced_pod("default", _gang_pod(f"{name}-{attempt}", "idle-test", policy))
        assert [g.name for g in pod.spec.scheduling_gates or []] == [GATE], f"attempt {attempt}: webhook skipped"
        _wait_until_idle_connections_closed(short_keep_alive)
    kube.close()


class _ScriptedWebhook:
    """A webhook that allows everything, with a scripted way of ending connections: ``hang_up`` closes the
    connection after reading its second request, without answering it; ``reset`` resets (RST) a connection after
    its first response once ``reset_now`` is set, as a server or middlebox dropping idle connections does."""

    def __init__(self, tls, script: str) -> None:
        import ssl
        import struct
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests = 0
        self.reset_now, self.reset_done = threading.Event(), threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            served = 0

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests += 1
                self.served += 1
                if script == "hang_up" and self.served == 2:
                    self.close_connection = True  # the request was read: hang up before a response byte
                    return
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                    "uid": review["request"]["uid"], "allowed": True}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = script == "reset"

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def shutdown_request(self, request) -> None:
                if script == "reset":  # linger 0: close() sends RST
                    outer.reset_now.wait(10)  # once the client has read the response (a RST discards unread data)
                    request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    request.close()
                    outer.reset_done.set()
                else:
                    super().shutdown_request(request)

        outer = self
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert, tls.key)
        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/mutate"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted(cluster, tls, request):
    """(the server, a CoreV1Api of a client of its own, the webhook's name) for ``request.param`` = (script, policy):
    the server registered as a mutating webhook for pods labelled ``scripted: <script>-<policy>``."""
    script, policy = request.param
    server = _ScriptedWebhook(tls, script)
    kube = config.new_client_from_config(cluster.kubeconfig)  # one client: one apiserver connection and thread
    name = f"{script.replace('_', '')}-{policy.lower()}"
    admission_api = client.AdmissionregistrationV1Api(kube)
    admission_api.create_mutating_webhook_configuration(webhook_configuration(
        "Mutating", name, server.url, tls.ca_bundle_b64(), failure_policy=policy,
        object_selector={"matchLabels": {"scripted": name}}))
    yield server, client.CoreV1Api(kube), name
    admission_api.delete_mutating_webhook_configuration(name)
    server.close()
    kube.close()


def _labelled_pod(name: str, value: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"scripted": value}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.mark.parametrize("scripted", [("reset", "Fail")], indirect=True)
def test_a_request_that_failed_with_nothing_written_is_sent_again(scripted, monkeypatch):
    """Go's nothingWrittenError: a reused connection that fails before a byte of the request went out (here the
    server reset it, and the reset lands just as the connection is taken from the pool, before the idle check
    could see it) is retried once on a new connection, POST or not."""
    server, core, name = scripted
    monkeypatch.setattr(admission, "_closed_while_idle", lambda conn: False)  # the race: the check saw nothing
    for attempt in range(3):
        core.create_namespaced_pod("default", _labelled_pod(f"{name}-{attempt}", name))
        server.reset_now.set()
        assert server.reset_done.wait(10)
        server.reset_now.clear()
        server.reset_done.clear()
    assert server.requests == 3


@pytest.mark.parametrize("scripted", [("hang_up", "Fail"), ("hang_up", "Ignore")], indirect=True)
def test_a_post_the_webhook_read_is_not_sent_again(scripted):
    """Once the request went out, a POST is not replayable (Go's isReplayable): the connection breaking before
    a response byte is the call's failure, handled by failurePolicy, and the webhook saw the request once."""
    server, core, name = scripted
    core.create_namespaced_pod("default", _labelled_pod(f"{name}-0", name))
    if name.endswith("fail"):
        with pytest.raises(ApiException) as failed:
            core.create_namespaced_pod("default", _labelled_pod(f"{name}-1", name))
        message = json.loads(failed.value.body)["message"]
        assert failed.value.status == 500 and f'failed calling webhook "{name}.kubenexus.io"' in message
    else:
        assert core.create_namespaced_pod("default", _labelled_pod(f"{name}-1", name)).metadata.name == f"{name}-1"
    assert server.requests == 2
