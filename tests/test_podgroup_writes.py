"""PodGroup writes are coalesced and bounded: a 1 + 1,000 gang arriving member by member, released, binding and
starting costs a handful of writes, whatever the number of passes and member changes.

The controller's own pieces, driven pass by pass on a simulated clock (no scheduler: the test plays the members'
arrival, binding and start as watch events would deliver them): ``ClusterState`` and ``Engine`` decide, ``Tracker``
computes the changed PodGroups, ``PodGroupWriter`` writes them to the local cluster's apiserver (the PodGroup CRD
of deploy/base installed), with the writer's clock the simulated one.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from cluster.local import LocalCluster
from controller.engine import Cycle, Engine
from controller.podgroups import PodGroupWriter
from controller.state import ClusterState
from controller.status import Tracker
from gang.config import Config
from kube.client import new_api_client
from tests.support.contract import GATE, GROUP, MIN, OWNER, OWNER_UID, PLANNED_NODE
from tests.support.podgroups import install_crd, phase, podgroup
from tests.support.polling import wait_for
from tests.support.state_objects import node

pytestmark = pytest.mark.e2e

T0 = datetime.datetime(2026, 11, 22, 10, 0, tzinfo=datetime.UTC)
MEMBERS = 1001  # 1 + 1,000
NODES = 130  # of 8 cpu: 1,040 cpu for 1,001 members of 1 cpu


class Clock:
    def __init__(self) -> None:
        self.now = T0.timestamp()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=str(tmp_path_factory.mktemp("podgroup-writes"))) as local:
        yield local


def member(i: int, ns: str, root_uid: str, *, node_name: str = "", phase_: str = "Pending") -> dict[str, Any]:
    name = "big-master-0" if i == 0 else f"big-worker-{i - 1}"
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    annotations = {OWNER: "/v1/ConfigMap/big", OWNER_UID: root_uid}
    if node_name:
        spec["nodeName"] = node_name
        annotations[PLANNED_NODE] = node_name
    else:
        spec["schedulingGates"] = [{"name": GATE}]
    created = (T0 + datetime.timedelta(milliseconds=i)).isoformat().replace("+00:00", "Z")
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{i}", "creationTimestamp": created,
                         "labels": {GROUP: "big", MIN: str(MEMBERS)}, "annotations": annotations},
            "spec": spec, "status": {"phase": phase_}}


def test_a_1_plus_1000_gang_costs_a_bounded_number_of_writes(cluster: LocalCluster) -> None:
    admin = config.new_client_from_config(cluster.kubeconfig)
    install_crd(admin)
    core = client.CoreV1Api(admin)
    ns = "big"
    core.create_namespace({"metadata": {"name": ns}})
    root = core.create_namespaced_config_map(ns, {"metadata": {"name": "big"}})  # the gang's root: a live owner
    clock = Clock()
    writer = PodGroupWriter(new_api_client(cluster.kubeconfig, 4, 0), leading=lambda: True, workers=0,
                            clock=clock, wall=clock).start()
    try:
        wait_for(lambda: writer.synced, 10, "the PodGroup informer synced")
        state = ClusterState()
        for i in range(NODES):
            state.upsert_node(node(f"n{i}", cpu="8", pods="110"))
        engine, tracker = Engine(state, Config()), Tracker()
        passes, events, loop_seconds = 0, 0, 0.0

        def one_pass(step: float = 0.1) -> Cycle:
            nonlocal passes, loop_seconds
            clock.now += step
            cycle = engine.cycle(clock.now)
            started = time.perf_counter()
            writer.submit(*tracker.update(cycle, state, clock.now))
            loop_seconds += time.perf_counter() - started
            passes += 1
            writer.sync_due()
            return cycle

        # arrival: 50 members per pass, 0.1 s apart (the operator creating them in a loop)
        for i in range(MEMBERS):
            state.upsert_pod(member(i, ns, root.metadata.uid), clock.now)
            events += 1
            if i % 50 == 49:
                one_pass()
        planned = {r.pod.name: r.node for r in one_pass().releases}  # complete: the whole gang is released
        assert len(planned) == MEMBERS and all(planned.values()), "every member released onto a node"
        # binding, then starting: 200 members per pass each
        for phase_ in ("Pending", "Running"):
            for i in range(MEMBERS):
                obj = member(i, ns, root.metadata.uid, node_name=planned[member(i, ns, "")["metadata"]["name"]],
                             phase_=phase_)
                state.upsert_pod(obj, clock.now)
                events += 1
                if i % 200 == 199:
                    one_pass()
            one_pass()
        for _ in range(3):  # the last counts, written once the interval has passed
            one_pass(step=writer.interval)
        stored = wait_for(lambda: podgroup(admin, ns, "big"), 5, "the PodGroup")
        assert phase(stored) == "Running" and stored["status"]["running"] == MEMBERS, stored["status"]
        assert stored["spec"]["minMember"] == MEMBERS
        requests = dict(writer.requests)
        writes = requests.get("create", 0) + requests.get("patch", 0) + requests.get("patch_status", 0)
        print(f"\n1 + 1,000 gang: {events} member events, {passes} passes -> {writes} PodGroup writes {requests}; "
              f"status computation on the loop {loop_seconds * 1000 / passes:.2f} ms per pass")
        assert requests.get("create") == 1
        assert writes <= 10, requests
    finally:
        writer.stop()
