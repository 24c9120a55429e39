"""The official client against the local cluster, and the real webhook registered with it."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from cluster.local import LocalCluster
from kubenexus.local_webhook import LocalWebhook, register
from tests.support.roots import Obj

WEBHOOK_IDENTITY = "system:serviceaccount:kubenexus-system:kubenexus-webhook"
CLUSTER_SCOPED = ("ClusterTrainingRuntime",)


class Kube:
    """The official client, returning plain dicts exactly as the apiserver serialised them."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    def namespace(self, labels: dict[str, str] | None = None) -> str:
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
        return name

    def ensure_namespace(self, name: str) -> None:
        """Create namespace ``name`` unless it exists (modules that share a cluster each ask for the controller's)."""
        try:
            self.core.create_namespace({"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise

    def create(self, ns: str, obj: Obj) -> Obj:
        if obj["apiVersion"] == "batch/v1":
            create = self.batch.create_namespaced_cron_job if obj["kind"] == "CronJob" else \
                self.batch.create_namespaced_job
            return self.api_client.sanitize_for_serialization(create(ns, obj))
        group, version = obj["apiVersion"].split("/")
        if obj["kind"] in CLUSTER_SCOPED:
            return self.custom.create_cluster_custom_object(group, version, obj["kind"].lower() + "s", obj)
        return self.custom.create_namespaced_custom_object(group, version, ns, obj["kind"].lower() + "s", obj)

    def get(self, ns: str, api_version: str, kind: str, name: str) -> Obj:
        group, version = api_version.split("/")
        return self.custom.get_namespaced_custom_object(group, version, ns, kind.lower() + "s", name)

    @staticmethod
    def _items(response: Any) -> list[Obj]:
        return sorted(json.loads(response.data)["items"], key=lambda o: o["metadata"]["name"])

    def pods(self, ns: str, selector: str = "") -> list[Obj]:
        return self._items(self.core.list_namespaced_pod(ns, label_selector=selector, _preload_content=False))

    def jobs(self, ns: str) -> list[Obj]:
        return self._items(self.batch.list_namespaced_job(ns, _preload_content=False))

    def statefulsets(self, ns: str) -> list[Obj]:
        return self._items(self.apps.list_namespaced_stateful_set(ns, _preload_content=False))


@contextlib.contextmanager
def admitted(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    """The admin client, with ``kubenexus webhook`` (default settings) running and registered for pod admission."""
    hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY), {})
    try:
        hook.wait_ready()
        api = Kube(config.new_client_from_config(cluster.kubeconfig))
        register(client.AdmissionregistrationV1Api(api.api_client), hook)
        yield api
    finally:
        hook.stop()


def pods_resource(cluster: LocalCluster) -> Any:
    resource = cluster.registry.get("", "v1", "pods")
    assert resource is not None
    return resource
