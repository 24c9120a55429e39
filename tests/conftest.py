"""Fixtures: the stub apiserver, generated TLS material, running ``kubenexus webhook`` servers, and clients of a
module's local cluster (the module defines ``cluster``)."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from kubernetes import client, config

from certs.generate import generate
from kubenexus.local_webhook import KUBENEXUS, LocalWebhook, free_port  # noqa: F401 (re-exported for tests)
from tests.apiserver_stub import StubApiServer
from tests.pod_rules import pod_errors


class Webhook(LocalWebhook):
    """A running ``kubenexus webhook`` process and an HTTPS client for it."""

    def __init__(self, workdir: Path, certs: Any, kubeconfig: str, settings: dict[str, Any]) -> None:
        super().__init__(workdir, certs, kubeconfig, settings)
        self._conn: http.client.HTTPSConnection | None = None
        self.wait_ready()

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One request on the kept-alive connection; like any HTTP client (the apiserver's Go transport too), a
        request that fails on a reused connection the server has since closed (its keep-alive expired while this
        session-wide webhook sat idle) is sent once more on a fresh one."""
        for attempt in (1, 2):
            reused = self._conn is not None
            if self._conn is None:
                self._conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=10)
            try:
                self._conn.request(method, path, body=body,
                                   headers=headers or {"Content-Type": "application/json"})
                response = self._conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException) as exc:
                self._conn.close()
                self._conn = None
                stale = isinstance(exc, ConnectionError | http.client.RemoteDisconnected | ssl.SSLEOFError)
                if not (reused and stale and attempt == 1):
                    raise
        raise AssertionError("unreachable")

    def review(self, endpoint: str, request: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        status, data = self.request("POST", endpoint, json.dumps(body).encode())
        assert status == 200, data
        review = json.loads(data)
        assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
        assert review["response"]["uid"] == request["uid"]
        return review["response"]

    def admit(self, pod: dict[str, Any], namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """CREATE ``pod`` through /mutate; the response and the pod as the apiserver would store it."""
        response = self.review("/mutate", pod_request(pod, namespace))
        assert response["allowed"] is True
        after = pod
        if "patch" in response:
            assert response["patchType"] == "JSONPatch"
            after = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
        assert pod_errors(after) == []
        return response, after

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        super().stop()


def pod_request(pod: dict[str, Any], namespace: str, operation: str = "CREATE",
                old: dict[str, Any] | None = None, username: str = "system:serviceaccount:ops:spark-operator"
                ) -> dict[str, Any]:
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": (pod.get("metadata") or {}).get("name", ""),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": pod,
        "oldObject": old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }


@pytest.fixture(scope="module")
def api(cluster: Any) -> Iterator[client.ApiClient]:
    """The admin client of the module's ``cluster`` fixture (a LocalCluster)."""
    api_client = config.new_client_from_config(cluster.kubeconfig)
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="session")
def apiserver() -> Iterator[StubApiServer]:
    server = StubApiServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kubenexus")


@pytest.fixture(scope="session")
def tls(workdir: Path) -> Any:
    return generate("kubenexus-webhook", "kubenexus-system", str(workdir / "certs"),
                    extra_dns=["localhost"], extra_ips=["127.0.0.1"])


@pytest.fixture(scope="session")
def start_webhook(workdir: Path, tls: Any, apiserver: StubApiServer) -> Iterator[Any]:
    """Start a webhook with the given settings; all are stopped at the end of the session."""
    kubeconfig = apiserver.write_kubeconfig(str(workdir / "kubeconfig"))
    running: dict[str, Webhook] = {}

    def start(**settings: Any) -> Webhook:
        key = json.dumps(settings, sort_keys=True)
        if key not in running:
            running[key] = Webhook(workdir, tls, kubeconfig, settings)
        return running[key]

    yield start
    for hook in running.values():
        hook.stop()


@pytest.fixture(scope="session")
def webhook(start_webhook: Any) -> Webhook:
    """The webhook with the shipped defaults."""
    return start_webhook()


@pytest.fixture
def namespace(apiserver: StubApiServer) -> str:
    """A fresh namespace (fresh owner-cache keys), registered in the stub apiserver."""
    name = f"ns-{uuid.uuid4().hex[:10]}"
    apiserver.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": name}})
    return name


def wait_for(check: Callable[[], Any], timeout: float = 10.0, what: str | Callable[[], str] = "") -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` (text, or a callable for
    a message computed at the time of failure) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    described = what() if callable(what) else (what or check)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {described}: last value {value!r}")
