"""The shipped manifests on the local cluster: rendered by kubectl kustomize, applied by kubectl, the webhook's CA
bundle as installed."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client import ApiException

from cluster.rbac import load_manifests
from kubenexus.local_product import WEBHOOK_CONFIGURATIONS, by_url
from tests.support.kube import Kube

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = Path(sys.executable).parent / "kubectl"
NAMESPACE = "kubenexus-system"
WEBHOOK = f"system:serviceaccount:{NAMESPACE}:kubenexus-webhook"
SECRET = "kubenexus-webhook-tls"
CONFIGURATION = "kubenexus-gang-admission"
Obj = dict[str, Any]


def render(path: str = "deploy/base") -> list[Obj]:
    done = subprocess.run([KUBECTL, "kustomize", str(ROOT / path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return load_manifests(done.stdout)


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
