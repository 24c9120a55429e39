"""The shipped manifests on the local cluster: rendered by kubectl kustomize, applied by kubectl, the webhook's CA
bundle as installed; the product installed from a release manifest (``Installed``)."""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client import ApiException

from cluster.local import LocalCluster
from cluster.rbac import load_manifests
from controller.run import Controller
from gang.config import config_from_text
from kube.client import new_api_client
from kubenexus.local_product import START_SECONDS, WEBHOOK_CONFIGURATIONS, by_url
from kubenexus.local_webhook import KUBENEXUS, LocalWebhook, free_port
from tests.support.contract import CONTROLLER
from tests.support.kube import Kube
from tests.support.polling import wait_for
from tools.release import kustomize

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = Path(sys.executable).parent / "kubectl"
NAMESPACE = "kubenexus-system"
WEBHOOK = f"system:serviceaccount:{NAMESPACE}:kubenexus-webhook"
SECRET = "kubenexus-webhook-tls"
CONFIGURATION = "kubenexus-gang-admission"
Obj = dict[str, Any]


def render(path: str = "deploy/base") -> list[Obj]:
    return load_manifests(kustomize(ROOT / path))


def webhook_configurations(rendered: list[Obj], url: str) -> list[Obj]:
    """The rendered webhook configurations, reaching the local webhook by URL instead of through its Service."""
    return [by_url(obj, url) for obj in rendered if obj.get("kind") in WEBHOOK_CONFIGURATIONS]


def register_shipped(api_client: Any, url: str, ca_bundle_b64: str | None = None,
                     rendered: list[Obj] | None = None) -> list[Obj]:
    """Create the shipped webhook configurations (``rendered``, else deploy/base) calling the local webhook at
    ``url``: trusting ``ca_bundle_b64`` when given, else as shipped (a webhook managing its own certificates writes
    its bundle). Returns what was created."""
    admission = client.AdmissionregistrationV1Api(api_client)
    configurations = webhook_configurations(render() if rendered is None else rendered, url)
    for obj in configurations:
        if ca_bundle_b64 is not None:
            for entry in obj["webhooks"]:
                entry["clientConfig"]["caBundle"] = ca_bundle_b64
        if obj["kind"] == "MutatingWebhookConfiguration":
            admission.create_mutating_webhook_configuration(obj)
        else:
            admission.create_validating_webhook_configuration(obj)
    return configurations


def secret_bundle(kube: Kube) -> bytes | None:
    try:
        secret = kube.core.read_namespaced_secret(SECRET, NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    data = secret.data or {}
    return base64.b64decode(data["ca-bundle.crt"]) if "ca-bundle.crt" in data else None


def bundles_installed(kube: Kube) -> bool:
    bundle = secret_bundle(kube)
    if bundle is None:
        return False
    wanted = base64.b64encode(bundle).decode()
    admission = client.AdmissionregistrationV1Api(kube.api_client)
    configs = [admission.read_mutating_webhook_configuration(CONFIGURATION),
               admission.read_validating_webhook_configuration(CONFIGURATION)]
    return all(h.client_config.ca_bundle == wanted for c in configs for h in c.webhooks)


class Kubectl:
    def __init__(self, kubeconfig: str, cache_dir: Path) -> None:
        self.base = [str(KUBECTL), "--kubeconfig", kubeconfig, "--cache-dir", str(cache_dir)]

    def __call__(self, *args: str, stdin: Obj | None = None) -> str:
        document = yaml.safe_dump(stdin) if stdin is not None else None
        done = subprocess.run([*self.base, *args], input=document, capture_output=True, text=True, timeout=60,
                              cwd=ROOT)
        assert done.returncode == 0, f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr}"
        return done.stdout


def local_manifest(text: str, url: str) -> str:
    """A release manifest as the local cluster can use it: its webhook configurations call the webhook at ``url``
    (the cluster routes no Services), everything else as released."""
    return yaml.safe_dump_all([by_url(obj, url) if obj.get("kind") in WEBHOOK_CONFIGURATIONS else obj
                               for obj in load_manifests(text)], sort_keys=False)


class Installed:
    """The product installed from a release manifest with ``kubectl apply --server-side``, on a local cluster that
    runs no Deployment pods: the webhook runs here as a process (self-managed certificates: it creates the Secret
    and the caBundles) and the gate controller as a thread with leader election, each under its service account
    and with the installed ConfigMap's settings, as in test_doctor."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster, self.workdir = cluster, workdir
        self.kubectl = Kubectl(cluster.kubeconfig, workdir / "kube-cache")
        self.kube = Kube(config.new_client_from_config(cluster.kubeconfig))
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.webhook: LocalWebhook | None = None
        self.controller: Controller | None = None

    def apply(self, manifest: Path) -> str:
        """``kubectl apply --server-side -f`` the manifest (its webhook configurations calling the local webhook)."""
        local = self.workdir / f"local-{manifest.name}"
        local.write_text(local_manifest(manifest.read_text(), self.url))
        return self.kubectl("apply", "--server-side", "-f", str(local))

    def start(self, server: Obj | None = None) -> None:
        """Both components, as the installed configuration says (``server``: settings of its ``server`` section
        changed); returns once the webhook serves with its caBundles installed and the controller leads."""
        settings = yaml.safe_load(self.kube.core.read_namespaced_config_map(
            "kubenexus-config", NAMESPACE).data["config.yaml"])
        settings["server"] = {**settings.get("server", {}), **(server or {}),
                              "certDir": str(self.workdir / "webhook-certs")}
        settings["certs"] = {**settings.get("certs", {}), "extraSANs": ["127.0.0.1"]}
        self.webhook = LocalWebhook(self.workdir, None, self.cluster.add_user(WEBHOOK), settings, port=self.port)
        self.webhook.wait_ready(START_SECONDS)
        wait_for(lambda: bundles_installed(self.kube), START_SECONDS, "the Secret and its CA bundle installed")
        self.controller = Controller(new_api_client(self.cluster.add_user(CONTROLLER), 32, 3),
                                     config_from_text(yaml.safe_dump(settings), "config.yaml"), leader_elect=True,
                                     identity=f"kubenexus-controller-{uuid.uuid4().hex[:6]}",
                                     lease=(2.0, 1.5, 0.2), port=0)
        self.controller.start()
        wait_for(lambda: self.controller is not None and self.controller.leading, START_SECONDS,
                 "the controller to take the Lease")

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        if self.webhook is not None:
            self.webhook.stop()
            self.webhook = None

    def doctor(self) -> tuple[int, str]:
        done = subprocess.run([KUBENEXUS, "doctor", "--kubeconfig", self.cluster.kubeconfig], capture_output=True,
                              text=True, timeout=120)
        return done.returncode, done.stdout + done.stderr
