"""Namespace opt-in takes effect at once: a job created right after ``kubectl label namespace … enabled`` is gated, one
created right after the label is removed is not, and an invalid value is warned about when it is written.

The webhook runs as shipped (the rendered webhook configurations, reaching it by URL) on the local cluster with the
emulated Job controller. Before each change the namespace has just been read for a pod of another job, so a cached
copy of the namespace would still be fresh: only a watch can make the next job see the change.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config

from cluster.local import LocalCluster
from gang.kinds import NAMESPACE
from kube.client import new_api_client
from kube.namespaces import ListedNamespaces, WatchedNamespaces
from kube.source import ApiSource
from tests.support.contract import GATE, GROUP, OPT_IN
from tests.support.deploy import WEBHOOK, register_shipped
from tests.support.kube import Kube
from tests.support.kubectl import Kubectl
from tests.support.polling import wait_for
from tests.support.webhook import Webhook

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=str(tmp_path_factory.mktemp("namespace-opt-in"))) as running:
        running.run_components()
        yield running


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster) -> Iterator[Kube]:
    kube = Kube(config.new_client_from_config(cluster.kubeconfig))
    yield kube
    kube.api_client.close()


@pytest.fixture(scope="module")
def kubectl(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(cluster.kubeconfig, tmp_path_factory.mktemp("kube-cache"))


@pytest.fixture(scope="module")
def webhook(cluster: LocalCluster, kube: Kube, workdir: Path, tls: Any) -> Iterator[Webhook]:
    hook = Webhook(workdir, tls, cluster.add_user(WEBHOOK), {})
    register_shipped(kube.api_client, hook.url, tls.ca_bundle_b64())
    yield hook
    hook.stop()


def job(name: str) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.example.com/train:1",
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}


def pods_of(kube: Kube, namespace: str, name: str) -> list[Obj]:
    """The job's two pods once both exist, as plain dicts."""
    found = kube.core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
    return [kube.api_client.sanitize_for_serialization(p) for p in found] if len(found) == 2 else []


def gated(pod: Obj) -> bool:
    return GATE in [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def run_job(kube: Kube, namespace: str, name: str) -> list[Obj]:
    kube.create(namespace, job(name))
    return wait_for(lambda: pods_of(kube, namespace, name), 30, f"the two pods of job {name}")


def test_a_label_change_applies_to_the_next_job(kube: Kube, kubectl: Kubectl, webhook: Webhook) -> None:
    namespace = kube.namespace()
    assert not any(map(gated, run_job(kube, namespace, "before"))), "an unlabelled namespace does not opt in"

    kubectl("label", "namespace", namespace, f"{OPT_IN}=enabled")
    pods = run_job(kube, namespace, "enabled")  # created at once: no wait for any cache
    assert all(map(gated, pods)), pods
    assert {p["metadata"]["labels"][GROUP] for p in pods} == {"enabled"}

    kubectl("label", "namespace", namespace, f"{OPT_IN}-")
    assert not any(map(gated, run_job(kube, namespace, "unlabelled"))), "the opt-in was taken back"

    kubectl("label", "namespace", namespace, f"{OPT_IN}=enabled")
    assert all(map(gated, run_job(kube, namespace, "enabled-again")))
    kubectl("label", "--overwrite", "namespace", namespace, f"{OPT_IN}=disabled")
    assert not any(map(gated, run_job(kube, namespace, "disabled")))


def test_an_invalid_value_is_warned_about_and_ignored(kube: Kube, kubectl: Kubectl, webhook: Webhook,
                                                      tmp_path: Path) -> None:
    namespace = kube.namespace()
    done = kubectl("label", "namespace", namespace, f"{OPT_IN}=yes")
    assert f"Warning: kubenexus: namespace {namespace}: label {OPT_IN}='yes' is ignored" in done.stderr, done.stderr
    assert not any(map(gated, run_job(kube, namespace, "yes")))
    # the fix, and unrelated changes of valid namespaces, pass without a word
    for change in (f"{OPT_IN}=enabled", "team=a"):
        done = kubectl("label", "--overwrite", "namespace", namespace, change)
        assert "Warning" not in done.stderr, done.stderr
    # a namespace created with an invalid value
    created = f"{namespace}-created"
    manifest = tmp_path / "namespace.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": created, "labels": {OPT_IN: "true"}}}))
    done = kubectl("create", "-f", str(manifest))
    assert f"Warning: kubenexus: namespace {created}: label {OPT_IN}='true' is ignored" in done.stderr, done.stderr


def test_the_watch_sees_a_label_within_milliseconds(cluster: LocalCluster, kube: Kube) -> None:
    """The namespace source of a webhook worker, in process: reads go to the fallback until the watch is open, then
    follow label changes as their events arrive (measured here: docs/concepts/gang-contract.md promises 'at
    once')."""
    fallback_reads: list[str] = []

    class Fallback:
        def get(self, kind: Any, api_version: str, namespace: str | None, name: str, uid: str | None = None,
                deadline: Any = None) -> Obj | None:
            fallback_reads.append(name)
            return {"metadata": {"name": name, "labels": {OPT_IN: "from-fallback"}}}

    namespace = kube.namespace({OPT_IN: "enabled"})
    source = WatchedNamespaces(new_api_client(cluster.kubeconfig, pool_size=2, retries=0), Fallback(), Fallback())

    def label() -> str | None:
        found = source.get(NAMESPACE, "v1", None, namespace) or {}
        return (found.get("metadata", {}).get("labels") or {}).get(OPT_IN)

    assert label() == "from-fallback" and fallback_reads == [namespace], "no watch yet: the fallback answers"
    source.start()
    try:
        wait_for(lambda: source.watching, 10, "the namespace watch to open")
        assert label() == "enabled"
        delays = []
        for value in ("disabled", None, "enabled", None):
            patch = {"metadata": {"labels": {OPT_IN: value}}}
            began = time.monotonic()
            kube.core.patch_namespace(namespace, patch)
            wait_for(lambda v=value: label() == v, 5, f"the watch to deliver {value}")  # type: ignore[misc]
            delays.append(time.monotonic() - began)
        assert fallback_reads == [namespace], "while the watch is open, no read goes elsewhere"
        assert max(delays) < 1.0, delays
        print(f"label change seen by the watch after {[f'{d * 1000:.1f} ms' for d in delays]} (incl. the PATCH)")
    finally:
        source.stop()
    wait_for(lambda: not source.watching, 10, "the watch to close")
    assert label() == "from-fallback"


def test_while_no_watch_is_open_namespaces_are_listed_by_name(cluster: LocalCluster, kube: Kube) -> None:
    """The fallback reads one namespace by a LIST on its name (the webhook may list and watch namespaces, not get
    them): the namespace with its labels, or None for one that does not exist."""
    namespace = kube.namespace({OPT_IN: "enabled", "team": "a"})
    kube.namespace({OPT_IN: "enabled"})  # another one, which the selector leaves out
    source = ListedNamespaces(ApiSource(new_api_client(cluster.kubeconfig, pool_size=2, retries=0), 5.0))
    found = source.get(NAMESPACE, "v1", None, namespace) or {}
    assert found["metadata"]["name"] == namespace and found["metadata"]["labels"][OPT_IN] == "enabled"
    assert source.get(NAMESPACE, "v1", None, f"{namespace}-missing") is None
