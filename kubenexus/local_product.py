"""The product on the local cluster, installed as ``kubectl apply -k deploy/base`` installs it on a real one.

One recipe for ``kubenexus cluster serve`` and ``kubenexus demo``: the shipped manifests (namespace, PodGroup CRD,
service accounts, RBAC, configuration, webhook configurations, ...) applied through the API, RBAC enforced for both
service accounts, the real ``kubenexus webhook`` under its service account with self-managed certificates (it
creates the Secret and writes the CA bundle into both configurations, as in a cluster) and the gate controller under
its own, with leader election (the Lease). The local cluster runs no containers and routes no Services, so the
Deployments are not applied: the components run here as a process and a thread, and the webhook configurations call
the webhook by URL instead of through its Service. Then ``kubenexus doctor`` finds what it finds on a real cluster.
"""

from __future__ import annotations

import copy
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gang import keys
from gang.config import Config, config_from_text
from kube.events import REPORTING_CONTROLLER
from kubenexus.doctor import CONFIG_KEY
from kubenexus.local_webhook import LocalWebhook, free_port

if TYPE_CHECKING:
    from cluster.local import LocalCluster
    from controller.run import Controller

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "base"
EXAMPLES = DEPLOY.parent.parent / "examples"  # jobs to try (docs/getting-started.md, docs/tasks/operators/)
#: A namespace ready for jobs: every job there is gang-scheduled (docs/getting-started.md).
READY_NAMESPACE = "gang-jobs"
WEBHOOK_CONFIGURATIONS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
NOT_APPLIED = ("Deployment",)  # their pods are the webhook process and the controller thread started here
START_SECONDS = 60.0


class NotShipped(RuntimeError):
    """This installation has no deploy/ directory (a wheel): there are no manifests to install."""


def account(config: Config, name: str) -> str:
    return f"system:serviceaccount:{config.namespace}:{name}"


def manifests(webhook_url: str, config_text: str) -> list[dict[str, Any]]:
    """deploy/base's objects as kustomize renders them (its ``resources`` and the generated ConfigMap, holding
    ``config_text``), without the Deployments, the webhook configurations calling ``webhook_url``."""
    spec = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    objects = [doc for name in spec["resources"] for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc]
    [generator] = spec["configMapGenerator"]
    objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": generator["name"], "namespace": generator["namespace"]},
                    "data": {CONFIG_KEY: config_text}})
    return [by_url(obj, webhook_url) if obj["kind"] in WEBHOOK_CONFIGURATIONS else obj
            for obj in objects if obj["kind"] not in NOT_APPLIED]


def by_url(configuration: dict[str, Any], url: str) -> dict[str, Any]:
    """A webhook configuration calling ``url`` (plus each entry's path) instead of the Service."""
    configuration = copy.deepcopy(configuration)
    for hook in configuration["webhooks"]:
        service = hook["clientConfig"].pop("service")
        hook["clientConfig"]["url"] = f"{url}{service.get('path', '/')}"
    return configuration


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        merged[key] = _merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) \
            else value
    return merged


class LocalProduct:
    """The webhook and the gate controller installed on ``cluster`` (components running), until ``stop()``.

    ``settings`` override the shipped config.yaml (as an edited ConfigMap would); both components run with the
    result, and the ConfigMap holds it."""

    def __init__(self, cluster: LocalCluster, settings: dict[str, Any] | None = None) -> None:
        if not (DEPLOY / "kustomization.yaml").exists():
            raise NotShipped(f"{DEPLOY} is missing: the product is installed from deploy/; run from a clone")
        self.cluster = cluster
        workdir = Path(cluster.workdir)
        port = free_port()
        self.webhook_url = f"https://127.0.0.1:{port}"
        shipped = yaml.safe_load((DEPLOY / CONFIG_KEY).read_text())
        local = {"server": {"certDir": str(workdir / "webhook-certs")}, "certs": {"extraSANs": ["127.0.0.1"]}}
        self.settings = _merged(_merged(shipped, local), settings or {})
        self.config_text = yaml.safe_dump(self.settings, sort_keys=False)
        self.config = config_from_text(self.config_text, CONFIG_KEY)
        self.webhook_identity = account(self.config, "kubenexus-webhook")
        self.controller_identity = account(self.config, "kubenexus-controller")
        self._port = port
        self.webhook: LocalWebhook | None = None
        self.controller: Controller | None = None

    def start(self) -> LocalProduct:
        """Install, start both components, wait until the webhook serves and the controller leads; then create
        the namespace ready for jobs (READY_NAMESPACE)."""
        from kubernetes import client, config, utils

        from controller.run import Controller
        from kube.client import new_api_client

        admin = config.new_client_from_config(self.cluster.kubeconfig)
        try:
            for obj in manifests(self.webhook_url, self.config_text):
                utils.create_from_dict(admin, obj)
            self.cluster.enforce_rbac(self.webhook_identity, self.controller_identity)
            self.webhook = LocalWebhook(Path(self.cluster.workdir), None, self.cluster.add_user(self.webhook_identity),
                                        self.settings, port=self._port)
            self.webhook.wait_ready(START_SECONDS)
            self.controller = Controller(new_api_client(self.cluster.add_user(self.controller_identity), 32, 3),
                                         self.config, leader_elect=True, identity="kubenexus-controller-local")
            self.controller.start()
            deadline = time.monotonic() + START_SECONDS
            while not self.controller.leading:
                if time.monotonic() > deadline:
                    raise RuntimeError("the gate controller did not take its Lease")
                time.sleep(0.05)
            client.CoreV1Api(admin).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
                name=READY_NAMESPACE, labels={keys.GANG_SCHEDULING: keys.NAMESPACE_ENABLED})))
        except BaseException:
            self.stop()
            raise
        finally:
            admin.close()
        return self

    def watch(self, wake: threading.Event) -> None:
        """Set ``wake`` when a component stops by itself (``failure`` says which): the webhook process exits, or
        the gate controller stops (it lost its Lease)."""
        assert self.webhook is not None and self.controller is not None

        def until(stopped: Callable[[], object]) -> None:
            stopped()
            wake.set()

        for stopped in (self.webhook.process.wait, self.controller.wait):
            threading.Thread(target=until, args=(stopped,), name="component-watch", daemon=True).start()

    def failure(self) -> str | None:
        """Which component stopped by itself, and why as far as it said; None while both run."""
        code = self.webhook.process.poll() if self.webhook is not None else None
        if self.webhook is not None and code is not None:
            if code < 0:
                return f"the webhook was killed by signal {-code} ({signal.Signals(-code).name})"
            last = self.webhook.last_line()  # it ended by itself: its log says why
            return f"the webhook exited with status {code}" + (f" (its last log line: {last})" if last else "")
        if self.controller is not None and not self.controller.leading:
            return "the gate controller stopped: it lost its Lease (its log is above)"
        return None

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
        if self.webhook is not None:
            self.webhook.stop()


def controller_events(api_client: Any, namespace: str | None = None) -> Iterator[dict[str, Any]]:
    """The gate controller's Events (events.k8s.io/v1) about gangs' roots, as they are written, in ``namespace`` or
    all: its decisions told (those on gated members repeat them). Read as plain JSON: an Event recorded through
    core/v1 has no eventTime, which the client's model requires."""
    from kubernetes import client, watch

    events = client.EventsV1Api(api_client)
    lister, scope = ((events.list_namespaced_event, (namespace,)) if namespace
                     else (events.list_event_for_all_namespaces, ()))
    for event in watch.Watch().stream(lister, *scope, deserialize=False):
        obj = event["object"]
        if (event["type"] == "ADDED" and obj.get("reportingController") == REPORTING_CONTROLLER
                and (obj.get("regarding") or {}).get("kind") != "Pod"):
            yield obj


def stop_on_signal() -> threading.Event:
    """An event set by Ctrl-C or SIGTERM (instead of their default: dying without stopping anything)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop
