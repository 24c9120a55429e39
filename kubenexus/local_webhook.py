"""Running ``kubenexus webhook`` next to a cluster it does not live in (the local cluster, tests, demo).

In a real cluster the webhook runs as a Deployment behind a Service; locally it is a process on
loopback, registered by URL with its CA bundle.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from gang import keys

KUBENEXUS = str(Path(sys.executable).parent / "kubenexus")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def deployment_env() -> dict[str, str]:
    """This process's environment as the Deployment's container has it in this respect: no metrics directory (the
    webhook makes its own; one inherited from here would be shared by every webhook started)."""
    return {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}


class LocalWebhook:
    """A ``kubenexus webhook`` process on 127.0.0.1, started with the given config settings.

    With ``certs`` the webhook only reads them (``certs.mode: external``, no ``certs ensure`` against the cluster);
    without, ``settings`` say where and how it gets its certificate (self-managed: it issues its own, as in a
    cluster). ``port`` is given when the webhook configurations must name it before the process starts."""

    def __init__(self, workdir: Path, certs: Any, kubeconfig: str, settings: dict[str, Any],
                 port: int | None = None) -> None:
        self.port = port or free_port()
        self.certs = certs
        given = {"server": {"certDir": str(Path(certs.cert).parent)}, "certs": {"mode": "external"}} if certs else {}
        config = {**given, "kubeconfig": kubeconfig, **settings}
        self.config_path = workdir / f"config-{self.port}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / f"webhook-{self.port}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop())
        self.process = subprocess.Popen(
            [KUBENEXUS, "webhook", "--config", str(self.config_path), "--bind", f"127.0.0.1:{self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT,
            # its temporary files (the metrics directory, the certificates' lock) in the workdir, gone with it, as a
            # container's /tmp is gone with its pod
            env={**deployment_env(), "TMPDIR": str(workdir)})
        # Readiness as the kubelet probes it when the CA is not known here: HTTPS, the certificate not verified.
        self.context = ssl.create_default_context(cafile=certs.ca_cert) if certs else _unverified()
        self.url = f"https://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"webhook exited: {self.log_path.read_text()}")
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=2)
            try:
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.1)
        raise RuntimeError(f"webhook not ready: {self.log_path.read_text()}")

    def last_line(self) -> str:
        """The last line the webhook logged: why it exited, when it did by itself."""
        lines = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def webhook_configuration(kind: str, name: str, url: str, ca_bundle: str, failure_policy: str = "Fail",
                          object_selector: dict | None = None, operations: tuple[str, ...] = ("CREATE",)) -> dict:
    """A Mutating/ValidatingWebhookConfiguration for pods, scoped away from disabled namespaces."""
    hook: dict[str, Any] = {
        "name": f"{name}.kubenexus.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": failure_policy, "timeoutSeconds": 5, "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": list(operations),
                   "scope": "Namespaced"}],
        "namespaceSelector": {"matchExpressions": [
            {"key": keys.GANG_SCHEDULING, "operator": "NotIn", "values": [keys.NAMESPACE_DISABLED]}]},
    }
    if kind == "Mutating":
        hook["reinvocationPolicy"] = "IfNeeded"
    if object_selector:
        hook["objectSelector"] = object_selector
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": f"{kind}WebhookConfiguration",
            "metadata": {"name": name}, "webhooks": [hook]}


def register(admission_api: Any, webhook: LocalWebhook) -> None:
    """Register the running webhook for pod mutation and validation (the product's two endpoints)."""
    bundle = webhook.certs.ca_bundle_b64()
    admission_api.create_mutating_webhook_configuration(
        webhook_configuration("Mutating", "kubenexus-mutate", f"{webhook.url}/mutate", bundle))
    admission_api.create_validating_webhook_configuration(
        webhook_configuration("Validating", "kubenexus-validate", f"{webhook.url}/validate", bundle,
                              operations=("CREATE", "UPDATE")))
