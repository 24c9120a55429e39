"""Releases against the local cluster's apiserver: completed when possible, never applied to the wrong pod."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from cluster.local import LocalCluster
from controller.engine import Release
from controller.members import pod_view
from controller.patcher import Patcher
from tests.support.contract import GATE

pytestmark = pytest.mark.e2e

PLANNED = "scheduling.kubenexus.io/planned-node"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=str(tmp_path_factory.mktemp("patcher"))) as running:
        yield running


@pytest.fixture(scope="module")
def core(cluster: LocalCluster) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(cluster.kubeconfig))


@pytest.fixture
def patcher(cluster: LocalCluster) -> Iterator[tuple[Patcher, list[str]]]:
    errors: list[str] = []
    running = Patcher(config.new_client_from_config(cluster.kubeconfig), errors.append, workers=2, timeout=5)
    yield running, errors
    running.stop()


def create(core: client.CoreV1Api, ns: str, name: str, gates: tuple[str, ...] = (GATE,)) -> dict[str, Any]:
    body = {"metadata": {"name": name, "annotations": {"scheduling.kubenexus.io/owner-uid": "r"}},
            "spec": {"containers": [{"name": "c", "image": "registry.example.com/c:1"}],
                     "schedulingGates": [{"name": g} for g in gates]}}
    created = core.create_namespaced_pod(ns, body)
    return core.api_client.sanitize_for_serialization(created)


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    name = f"patch-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def test_release_removes_the_gate_and_pins(core, ns, patcher):
    running, errors = patcher
    pod = create(core, ns, "w-0", gates=("example.com/quota", GATE))
    assert running.release(Release(pod_view(pod), "node-1", ("node-1", "node-2")))
    stored = core.read_namespaced_pod("w-0", ns)
    assert [g.name for g in stored.spec.scheduling_gates] == ["example.com/quota"]
    assert stored.metadata.annotations[PLANNED] == "node-1"
    [term] = stored.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert [(f.key, f.operator, f.values) for f in term.match_fields] == [("metadata.name", "In", ["node-1"])]
    assert errors == []


def test_a_stale_view_is_recomputed_from_a_fresh_read(core, ns, patcher):
    running, _ = patcher
    pod = create(core, ns, "w-1", gates=("example.com/quota", GATE))
    stale = pod_view(pod)
    core.patch_namespaced_pod("w-1", ns, [{"op": "replace", "path": "/spec/schedulingGates",
                                            "value": [{"name": GATE}]}])
    assert running.release(Release(stale, "node-1"))
    stored = core.read_namespaced_pod("w-1", ns)
    assert not stored.spec.scheduling_gates, "the other gate, removed meanwhile, is not added back"
    assert stored.metadata.annotations[PLANNED] == "node-1"


def test_a_pod_recreated_under_the_same_name_is_left_alone(core, ns, patcher):
    running, _ = patcher
    old = create(core, ns, "w-2")
    core.delete_namespaced_pod("w-2", ns, grace_period_seconds=0)
    create(core, ns, "w-2")
    assert not running.release(Release(pod_view(old), "node-1"))
    stored = core.read_namespaced_pod("w-2", ns)
    assert [g.name for g in stored.spec.scheduling_gates] == [GATE]
    assert PLANNED not in (stored.metadata.annotations or {})


def test_a_deleted_pod_is_done(core, ns, patcher):
    running, _ = patcher
    pod = create(core, ns, "w-3")
    core.delete_namespaced_pod("w-3", ns, grace_period_seconds=0)
    assert not running.release(Release(pod_view(pod), "node-1"))


def test_a_pod_released_meanwhile_counts_as_released(core, ns, patcher):
    running, _ = patcher
    pod = create(core, ns, "w-4")
    core.patch_namespaced_pod("w-4", ns, [{"op": "remove", "path": "/spec/schedulingGates"}])
    assert running.release(Release(pod_view(pod), "node-1"))
