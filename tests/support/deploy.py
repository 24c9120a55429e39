"""The shipped manifests on the local cluster: rendered by kubectl kustomize, applied by kubectl, the webhook's CA
bundle as installed; the product installed from a release manifest (``Installed``), its components this tree's or
another version's (``FromTree``)."""

from __future__ import annotations

import base64
import http.client
import ssl
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client import ApiException

from cluster.local import LocalCluster
from cluster.rbac import load_manifests
from controller.run import LEASE_NAME, Controller
from gang.config import config_from_text
from kube.client import new_api_client
from kubenexus.local_product import START_SECONDS, WEBHOOK_CONFIGURATIONS, by_url
from kubenexus.local_webhook import KUBENEXUS, LocalWebhook, deployment_env, free_port
from tests.support.contract import CONTROLLER
from tests.support.kube import Kube
from tests.support.polling import wait_for
from tools.release import kustomize, version

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


def serving(port: int) -> bool:
    """Whether the webhook on 127.0.0.1:``port`` is ready, probed as the kubelet probes it (HTTPS, the certificate
    not verified: the CA is not known here)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class FromTree:
    """``kubenexus`` commands run from another checkout's code (an earlier version, ``git archive``d): this venv's
    Python with the tree first on its import path, each command a process, as that version's image would run it.

    The tree is each process's working directory and PYTHONPATH, both searched before this checkout's editable
    install (a finder appended to ``sys.meta_path``); that every package of the tree is imported from the tree is
    checked at once, or an "earlier version" could silently be this one."""

    def __init__(self, tree: Path, workdir: Path) -> None:
        self.tree, self.workdir, self.version = tree.resolve(), workdir, version(tree)
        # its temporary files (metrics directory, the certificates' lock) in the workdir, as LocalWebhook's
        self.env = {**deployment_env(), "PYTHONPATH": str(self.tree), "TMPDIR": str(workdir)}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        include = tomllib.loads((self.tree / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
        packages = sorted({pattern.rstrip("*") for pattern in include["include"]})
        where = "import importlib, sys\nfor p in sys.argv[1:]: print(importlib.import_module(p).__file__)"
        done = subprocess.run([sys.executable, "-c", where, *packages], cwd=self.tree, env=self.env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"importing {packages} from {self.tree}: {done.stderr}"
        elsewhere = [file for file in done.stdout.splitlines() if not Path(file).is_relative_to(self.tree)]
        assert not elsewhere, f"run from {self.tree}, these come from elsewhere: {elsewhere}"

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}-{self.version}.log"

    def start(self, name: str, *args: str) -> None:
        """``kubenexus <args>`` from the tree, in its directory, logging to ``log(name)``."""
        with self.log(name).open("w") as log:
            self.processes[name] = subprocess.Popen([sys.executable, "-m", "kubenexus", *args], cwd=self.tree,
                                                    env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def running(self, name: str) -> bool:
        """True while the process runs; fails with its log once it exited by itself."""
        code = self.processes[name].poll()
        assert code is None, f"{name} of {self.version} exited {code}: {self.log(name).read_text()[-4000:]}"
        return True

    def exited(self) -> list[str]:
        """The processes that exited by themselves, each with its last line logged."""
        return [f"{name} ({self.version}) exited {process.returncode}: "
                f"{(self.log(name).read_text().strip().splitlines() or [''])[-1]}"
                for name, process in self.processes.items() if process.poll() is not None]

    def stop(self) -> None:
        """SIGTERM each process, the last started first (as a rollout's pods are told); SIGKILL after 15 s."""
        for process in reversed(self.processes.values()):
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()


class Installed:
    """The product installed from a release manifest with ``kubectl apply --server-side``, on a local cluster that
    runs no Deployment pods: the webhook runs here as a process (self-managed certificates: it creates the Secret
    and the caBundles) and the gate controller as a thread with leader election, each under its service account
    and with the installed ConfigMap's settings, as in test_doctor. Started from another version's tree, both are
    processes of that tree's code (``FromTree``)."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster, self.workdir = cluster, workdir
        self.kubectl = Kubectl(cluster.kubeconfig, workdir / "kube-cache")
        self.kube = Kube(config.new_client_from_config(cluster.kubeconfig))
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.webhook: LocalWebhook | None = None
        self.controller: Controller | None = None
        self.tree: FromTree | None = None  # the components, when run from another version's checkout

    def apply(self, manifest: Path) -> str:
        """``kubectl apply --server-side -f`` the manifest (its webhook configurations calling the local webhook)."""
        local = self.workdir / f"local-{manifest.name}"
        local.write_text(local_manifest(manifest.read_text(), self.url))
        return self.kubectl("apply", "--server-side", "-f", str(local))

    def start(self, server: Obj | None = None, tree: Path | None = None) -> None:
        """Both components, as the installed configuration says (``server``: settings of its ``server`` section
        changed), this checkout's or, with ``tree``, that checkout's (another version's); returns once the webhook
        serves with its caBundles installed and the controller leads."""
        settings = yaml.safe_load(self.kube.core.read_namespaced_config_map(
            "kubenexus-config", NAMESPACE).data["config.yaml"])
        settings["server"] = {**settings.get("server", {}), **(server or {}),
                              "certDir": str(self.workdir / "webhook-certs")}
        settings["certs"] = {**settings.get("certs", {}), "extraSANs": ["127.0.0.1"]}
        identity = f"kubenexus-controller-{uuid.uuid4().hex[:6]}"
        if tree is not None:
            self._start_from(FromTree(tree, self.workdir), settings, identity)
            return
        self.webhook = LocalWebhook(self.workdir, None, self.cluster.add_user(WEBHOOK), settings, port=self.port)
        self.webhook.wait_ready(START_SECONDS)
        wait_for(lambda: bundles_installed(self.kube), START_SECONDS, "the Secret and its CA bundle installed")
        self.controller = Controller(new_api_client(self.cluster.add_user(CONTROLLER), 32, 3),
                                     config_from_text(yaml.safe_dump(settings), "config.yaml"), leader_elect=True,
                                     identity=identity, lease=(2.0, 1.5, 0.2), port=0)
        self.controller.start()
        wait_for(lambda: self.controller is not None and self.controller.leading, START_SECONDS,
                 "the controller to take the Lease")

    def _start_from(self, tree: FromTree, settings: Obj, identity: str) -> None:
        """``kubenexus webhook`` and ``kubenexus controller --leader-elect`` from ``tree``, each with its own
        kubeconfig; the controller leads once the Lease names it."""
        self.tree = tree
        for name, user in (("webhook", WEBHOOK), ("controller", CONTROLLER)):
            (self.workdir / f"{name}-{tree.version}.yaml").write_text(
                yaml.safe_dump({**settings, "kubeconfig": self.cluster.add_user(user)}))
        tree.start("webhook", "webhook", "--config", str(self.workdir / f"webhook-{tree.version}.yaml"),
                   "--bind", f"127.0.0.1:{self.port}")
        wait_for(lambda: tree.running("webhook") and serving(self.port), START_SECONDS,
                 f"the webhook of {tree.version} to be ready")
        wait_for(lambda: bundles_installed(self.kube), START_SECONDS, "the Secret and its CA bundle installed")
        tree.start("controller", "controller", "--config", str(self.workdir / f"controller-{tree.version}.yaml"),
                   "--leader-elect", "--identity", identity, "--port", "0")
        wait_for(lambda: tree.running("controller") and self.lease_holder() == identity, START_SECONDS,
                 f"the controller of {tree.version} to take the Lease")

    def lease_holder(self) -> str | None:
        """Who holds the controller's Lease, as the cluster says."""
        try:
            lease = client.CoordinationV1Api(self.kube.api_client).read_namespaced_lease(LEASE_NAME, NAMESPACE)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return (lease.spec.holder_identity if lease.spec else None) or None

    def exited(self) -> list[str]:
        """The components that exited by themselves (each with its last line logged); none while all run."""
        gone = self.tree.exited() if self.tree is not None else []
        if self.webhook is not None and self.webhook.process.poll() is not None:
            gone.append(f"webhook exited {self.webhook.process.returncode}: {self.webhook.last_line()}")
        return gone

    def stop(self) -> None:
        if self.tree is not None:
            self.tree.stop()
            self.tree = None
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
