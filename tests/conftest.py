"""Fixtures: the stub apiserver, generated TLS material, and running ``kubenexus webhook`` servers."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from certs.generate import generate
from tests.apiserver_stub import StubApiServer
from tests.pod_rules import pod_errors

KUBENEXUS = str(Path(sys.executable).parent / "kubenexus")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Webhook:
    """A running ``kubenexus webhook`` process and an HTTPS client for it."""

    def __init__(self, workdir: Path, certs: Any, kubeconfig: str, settings: dict[str, Any]) -> None:
        self.port = free_port()
        config = {"server": {"certDir": str(Path(certs.cert).parent)}, "kubeconfig": kubeconfig, **settings}
        self.config_path = workdir / f"config-{self.port}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / f"webhook-{self.port}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop())
        self.process = subprocess.Popen(
            [KUBENEXUS, "webhook", "--config", str(self.config_path), "--bind", f"127.0.0.1:{self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": ""})
        self.context = ssl.create_default_context(cafile=certs.ca_cert)
        self._conn: http.client.HTTPSConnection | None = None
        self.wait_ready()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"webhook exited: {self.log_path.read_text()}")
            try:
                status, _ = self.request("GET", "/readyz")
                if status == 200:
                    return
            except OSError:
                self._conn = None
            time.sleep(0.1)
        raise RuntimeError(f"webhook not ready: {self.log_path.read_text()}")

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        if self._conn is None:
            self._conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=10)
        try:
            self._conn.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
            response = self._conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            self._conn.close()
            self._conn = None
            raise

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
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


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
