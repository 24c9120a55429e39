"""A running ``kubenexus webhook`` with an HTTPS client for it, and the AdmissionRequests the apiserver sends."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import uuid
from pathlib import Path
from typing import Any

import jsonpatch

from kubenexus.local_webhook import LocalWebhook
from tests.support.apiserver_rules import introduced_errors


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
        assert introduced_errors(pod, after, namespace) == []
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
