"""A topology-aware gang end to end on the local cluster with labelled nodes: webhook gates, controller releases
inside one rack, scheduler binds, the PodGroup (CRD of deploy/base installed) says where.

Four 4-cpu nodes in two racks (``example.com/rack``: r1 = rack-a1, rack-a2; r2 = rack-b1, rack-b2), each running a
2-cpu pod that is not a gang's. A PyTorchJob of 1 master + 4 workers x 1 cpu (5 cpu) requires one rack: the
cluster has 4 x 2 = 8 cpu free, a rack only 2 + 2 = 4, so it waits; once r2's two pods finish, r2 has 8 and the
whole job starts there (r1 still has only 4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cluster.local import LocalCluster, NodeSpec
from controller.run import Controller
from tests.support.gang_pods import (
    JOB_NAME,
    LEASE,
    TIMEOUT,
    delete_pods,
    describe,
    gated,
    name_of,
    running,
    torch_job,
    wait_event,
    wait_pods,
)
from tests.support.kube import Kube, admitted
from tests.support.podgroups import install_crd, podgroup
from tests.support.polling import stays, wait_for
from tests.support.roots import Obj

pytestmark = pytest.mark.e2e

RACK = "example.com/rack"
RACKS = {"rack-a1": "r1", "rack-a2": "r1", "rack-b1": "r2", "rack-b2": "r2"}
NODES = [NodeSpec(name, cpu="4", memory="16Gi", labels=(("pool", "cpu"), (RACK, rack))) for name, rack in RACKS.items()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=list(NODES), workdir=str(tmp_path_factory.mktemp("topology-e2e"))) as local:
        local.run_components()
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    with admitted(cluster, workdir, tls) as api:
        install_crd(api.api_client)
        api.ensure_namespace(LEASE[0])
        yield api


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    name = kube.namespace()
    yield name
    for obj in kube.custom.list_namespaced_custom_object("kubeflow.org", "v1", name, "pytorchjobs")["items"]:
        kube.custom.delete_namespaced_custom_object("kubeflow.org", "v1", name, "pytorchjobs", obj["metadata"]["name"])
    delete_pods(kube, name)


def busy_pod(node: str) -> Obj:
    """A 2-cpu pod that is no gang's, bound to ``node`` by its creator."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"busy-{node}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                        "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}]}}


def test_a_pytorchjob_requiring_one_rack_waits_for_a_rack_then_starts_inside_it(
        kube: Kube, ns: str, controllers: Callable[..., Controller]) -> None:
    for node in RACKS:
        kube.core.create_namespaced_pod(ns, busy_pod(node))
    wait_pods(kube, ns, lambda pods: len(pods) == 4 and all(running(p) for p in pods), "the busy pods running")
    controllers()
    job = torch_job("train", 4, "1")
    job["metadata"]["annotations"]["kubenexus.io/topology-required"] = RACK
    kube.create(ns, job)

    def members() -> list[Obj]:
        return kube.pods(ns, f"{JOB_NAME}=train")

    wait_pods(kube, ns, lambda pods: len(pods) == 5 and all(gated(p) for p in pods), "5 gated members",
              f"{JOB_NAME}=train")
    notes = wait_event(kube, ns, "PyTorchJob", "train", "GangInsufficientCapacity")
    assert any(f"no {RACK} domain has room for the whole gang now" in n for n in notes), notes
    stays(lambda: all(gated(p) for p in members()), "8 cpu are free, but 4 per rack: the job must stay gated")
    waiting = podgroup(kube.api_client, ns, "train")
    assert waiting is not None and waiting["status"]["topology"] == {"requests": [{"key": RACK, "mode": "Required"}]}

    for node in ("rack-b1", "rack-b2"):
        kube.core.delete_namespaced_pod(f"busy-{node}", ns, grace_period_seconds=0)
    started = wait_pods(kube, ns, lambda pods: len(pods) == 5 and all(running(p) for p in pods),
                        "all 5 members running", f"{JOB_NAME}=train")
    assert {p["spec"]["nodeName"] for p in started} <= {"rack-b1", "rack-b2"}, describe(started)
    released = wait_event(kube, ns, "PyTorchJob", "train", "GangReleased")
    assert any(f"in {RACK} domain r2" in n for n in released), released
    wait_for(lambda: ((podgroup(kube.api_client, ns, "train") or {}).get("status") or {}).get("topology", {})
             .get("domains") == ["r2"], TIMEOUT, lambda: f"PodGroup train: status.topology.domains = ['r2']; "
                                                          f"{podgroup(kube.api_client, ns, 'train')}")
    assert all(name_of(p).startswith("train-") for p in started)
