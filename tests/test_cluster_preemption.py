"""Preemption as kube-scheduler's DefaultPreemption does it (Kubernetes docs: Pod Priority and Preemption; the
scheduler's preemption.go and default_preemption.go), and nominated pods holding their room; expected values
worked by hand. The last tests run the emulated scheduler's passes in process on an unstarted LocalCluster."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cluster.controllers import Client
from cluster.local import ADMIN, LocalCluster, NodeSpec
from cluster.preemption import (
    NO_VICTIMS,
    NOT_HELPFUL,
    Candidate,
    pick_one,
    preempt,
    split_by_budget_violation,
    victims_on_node,
)
from cluster.scheduler import Scheduler
from cluster.scheduling import REASON_NODE_AFFINITY, schedule, unschedulable_message

pytestmark = pytest.mark.unit

Obj = dict[str, Any]


def node(name: str, cpu: str = "4") -> Obj:
    return {"metadata": {"name": name, "labels": {}}, "spec": {},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}


def pod(name: str, cpu: str, priority: int = 0, on: str = "", started: str = "2026-01-01T00:00:00Z",
        labels: Obj | None = None, **spec: Any) -> Obj:
    body: Obj = {"priority": priority, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                 **spec}
    status: Obj = {"phase": "Pending"}
    if on:
        body["nodeName"] = on
        status = {"phase": "Running", "startTime": started}
    return {"metadata": {"name": name, "namespace": "default", "uid": name, "labels": labels or {}}, "spec": body,
            "status": status}


def budget(allowed: int, labels: Obj, disrupted: Obj | None = None) -> Obj:
    return {"metadata": {"name": "pdb", "namespace": "default"}, "spec": {"selector": {"matchLabels": labels}},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted or {}}}


def names(pods: tuple[Obj, ...] | list[Obj]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def run(incoming: Obj, nodes: list[Obj], pods: list[Obj], pdbs: list[Obj] | None = None,
        nominated: list[Obj] | None = None) -> Any:
    chosen, reasons = schedule(incoming, nodes, pods, nominated or [])
    assert chosen is None, "the pod fits without preemption"
    return preempt(incoming, nodes, pods, reasons, pdbs or [], nominated or [])


# --- victims on one node ----------------------------------------------------------------------------------------


def test_the_fewest_least_important_pods_are_victims() -> None:
    """Remove every lower-priority pod, then give back the most important first while the incoming pod fits."""
    running = [pod("low-old", "1", 1, "a", started="2026-01-01T00:00:00Z"),
               pod("low-new", "1", 1, "a", started="2026-01-01T01:00:00Z"),
               pod("mid", "1", 5, "a"), pod("peer", "1", 10, "a")]
    found = victims_on_node(pod("in", "1", 10), node("a"), running, [], [])
    assert isinstance(found, Candidate) and (found.node, names(found.victims), found.pdb_violations) == (
        "a", ["low-new"], 0)  # mid and low-old (started earlier: more important) given back; peer never a victim
    found = victims_on_node(pod("in", "2", 10), node("a"), running, [], [])
    assert isinstance(found, Candidate) and names(found.victims) == ["low-old", "low-new"]


def test_no_lower_priority_pod_means_no_victims() -> None:
    assert victims_on_node(pod("in", "2", 10), node("a"), [pod("peer", "4", 10, "a")], [], []) == NO_VICTIMS


def test_a_pod_that_does_not_fit_even_alone_gets_the_filter_s_reason() -> None:
    assert victims_on_node(pod("in", "8", 10), node("a"), [pod("low", "1", 0, "a")], [], []) == "Insufficient cpu"


def test_budget_violating_victims_are_given_back_first() -> None:
    """Two equally important victims would do; the one whose budget is exhausted is reprieved first."""
    guarded = pod("guarded", "2", 0, "a", labels={"app": "db"}, started="2026-01-01T02:00:00Z")
    free = pod("free", "2", 0, "a", started="2026-01-01T01:00:00Z")
    found = victims_on_node(pod("in", "2", 10), node("a"), [guarded, free], [], [budget(0, {"app": "db"})])
    assert isinstance(found, Candidate) and (names(found.victims), found.pdb_violations) == (["free"], 0)
    found = victims_on_node(pod("in", "4", 10), node("a"), [guarded, free], [], [budget(0, {"app": "db"})])
    assert isinstance(found, Candidate) and (names(found.victims), found.pdb_violations) == (["free", "guarded"], 1)


def test_budget_violation_counting() -> None:
    a, b, c = (pod(n, "1", 0, "x", labels={"app": "db"}) for n in "abc")
    violating, ok = split_by_budget_violation([a, b, c], [budget(1, {"app": "db"}, disrupted={"a": "t"})])
    assert (names(violating), names(ok)) == (["c"], ["a", "b"])  # a already disrupted: not counted again
    assert split_by_budget_violation([a], [{**budget(0, {}), "spec": {"selector": {}}}]) == ([], [a])


def test_nominated_pods_of_at_least_the_incoming_priority_keep_their_room() -> None:
    waiting = {**pod("waiting", "2", 10), "status": {"phase": "Pending", "nominatedNodeName": "a"}}
    found = victims_on_node(pod("in", "3", 10), node("a"), [pod("low", "2", 0, "a")], [waiting], [])
    assert found == "Insufficient cpu"  # 4 cpu: the nominated pod's 2 and the incoming 3 do not fit, low or not
    chosen, reasons = schedule(pod("in", "3", 5), [node("a")], [waiting], [waiting])
    assert (chosen, reasons) == (None, {"a": "Insufficient cpu"})
    assert schedule(pod("in", "3", 20), [node("a")], [waiting], [waiting])[0] == "a"  # higher priority ignores it


# --- choosing the node ------------------------------------------------------------------------------------------


def candidate(node_name: str, *victims: Obj, violations: int = 0) -> Candidate:
    return Candidate(node_name, victims, violations)


@pytest.mark.parametrize(("candidates", "picked"), [
    ([candidate("a", pod("v", "1", 0), violations=1), candidate("b", pod("v", "1", 9))], "b"),  # fewest violations
    ([candidate("a", pod("v", "1", 5)), candidate("b", pod("v", "1", 3), pod("w", "1", 3))], "b"),  # lowest highest
    ([candidate("a", pod("v", "1", 3), pod("w", "1", 2)), candidate("b", pod("v", "1", 3), pod("w", "1", 1))], "b"),
    ([candidate("a", pod("v", "1", 3), pod("w", "1", -5)), candidate("b", pod("v", "1", 3))], "b"),  # 2**31 shift
    ([candidate("a", pod("v", "1", 3, on="a", started="2026-01-01T00:00:00Z")),
      candidate("b", pod("v", "1", 3, on="b", started="2026-01-01T05:00:00Z"))], "b"),  # latest start
    ([candidate("a", pod("v", "1", 3, on="a")), candidate("b", pod("v", "1", 3, on="b"))], "a"),  # the first
])
def test_pick_one_node(candidates: list[Candidate], picked: str) -> None:
    assert pick_one(candidates).node == picked


def test_preemption_picks_the_cheapest_node_and_leaves_the_others_alone() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("a-mid", "4", 5, "a"), pod("b-low", "4", 1, "b")]
    outcome = run(pod("in", "2", 10), nodes, pods)
    assert outcome.candidate is not None and (outcome.candidate.node, names(outcome.candidate.victims)) == (
        "b", ["b-low"]) and outcome.message == ""


def test_preemption_policy_never_and_no_victims_say_why_in_the_failed_scheduling_message() -> None:
    nodes = [node("a"), {**node("b"), "metadata": {"name": "b", "labels": {}}, "spec": {"unschedulable": True}}]
    pods = [pod("peer", "4", 10, "a")]
    outcome = run(pod("in", "2", 10, preemptionPolicy="Never"), nodes, pods)
    assert (outcome.candidate, outcome.message, outcome.clear) == (
        None, "preemption: not eligible due to preemptionPolicy=Never.", False)
    incoming = pod("in", "2", 10)
    chosen, reasons = schedule(incoming, nodes, pods)
    outcome = preempt(incoming, nodes, pods, reasons, [])
    assert outcome.clear and unschedulable_message(reasons, 2, outcome.message) == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable. preemption: 0/2 nodes are "
        f"available: 1 {NO_VICTIMS}, 1 {NOT_HELPFUL}..")


def test_nodes_failing_an_unresolvable_filter_are_never_candidates() -> None:
    selective = pod("in", "2", 10, nodeSelector={"zone": "x"})
    outcome = run(selective, [node("a")], [pod("low", "4", 0, "a")])
    assert outcome.candidate is None and outcome.message == f"preemption: 0/1 nodes are available: 1 {NOT_HELPFUL}."
    assert schedule(selective, [node("a")], [])[1] == {"a": REASON_NODE_AFFINITY}


def test_a_pod_whose_victims_are_still_terminating_waits() -> None:
    terminating = pod("victim", "4", 0, "a")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    terminating["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                            "reason": "PreemptionByScheduler"}]
    incoming = {**pod("in", "2", 10), "status": {"phase": "Pending", "nominatedNodeName": "a"}}
    outcome = run(incoming, [node("a"), node("b")], [terminating, pod("other", "4", 0, "b")])
    assert (outcome.candidate, outcome.message) == (
        None, "preemption: not eligible due to a terminating pod on the nominated node.")


def test_a_nominated_pod_goes_to_its_node_when_it_fits_there() -> None:
    nominated = {**pod("in", "1", 10), "status": {"phase": "Pending", "nominatedNodeName": "b"}}
    assert schedule(nominated, [node("a"), node("b")], [pod("busy", "3", 0, "b")], [nominated])[0] == "b"
    assert schedule(pod("in", "1", 10), [node("a"), node("b")], [pod("busy", "3", 0, "b")])[0] == "a"


# --- the scheduler carries it out -------------------------------------------------------------------------------


@dataclass
class Cluster:
    local: LocalCluster
    admin: Client
    scheduler: Scheduler

    def create(self, name: str, cpu: str, priority_class: str = "", **meta: Any) -> Obj:
        spec: Obj = {"terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
        if priority_class:
            spec["priorityClassName"] = priority_class
        return self.admin.create("/api/v1/namespaces/default/pods", {"metadata": {"name": name, **meta},
                                                                     "spec": spec})

    def get(self, name: str) -> Obj:
        return self.admin.call("GET", f"/api/v1/namespaces/default/pods/{name}")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    local = LocalCluster(nodes=[NodeSpec("node-a", cpu="4")])
    admin = Client(local.api, ADMIN)
    admin.create("/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": "high"}, "value": 1000})
    yield Cluster(local, admin, Scheduler(local.api, ("default-scheduler",), preemption=True))


def test_the_scheduler_marks_deletes_and_tells_the_victims_and_nominates_the_preemptor(cluster: Cluster) -> None:
    cluster.create("low", "3")
    cluster.scheduler.reconcile()
    assert cluster.get("low")["spec"]["nodeName"] == "node-a"
    preemptor = cluster.create("urgent", "2", "high")
    cluster.scheduler.reconcile()
    victim = cluster.get("low")
    assert victim["metadata"]["deletionGracePeriodSeconds"] == 30  # a plain DELETE: the pod's own grace period
    (target,) = [c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True", "PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod")
    status = cluster.get("urgent")["status"]
    assert status["nominatedNodeName"] == "node-a"
    (scheduled,) = [c for c in status["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled["message"] == "0/1 nodes are available: 1 Insufficient cpu."  # success adds nothing
    events = cluster.admin.call("GET", "/apis/events.k8s.io/v1/namespaces/default/events")["items"]
    (preempted,) = [e for e in events if e["reason"] == "Preempted"]
    assert (preempted["regarding"]["name"], preempted["related"]["name"], preempted["action"], preempted["note"]) == (
        "low", "urgent", "Preempting", f"Preempted by pod {preemptor['metadata']['uid']} on node node-a")
    cluster.scheduler.reconcile()  # the victim still terminates: no second preemption, the wait explained
    (scheduled,) = [c for c in cluster.get("urgent")["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled["message"] == ("0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to a "
                                    "terminating pod on the nominated node..")
    cluster.admin.call("DELETE", "/api/v1/namespaces/default/pods/low", {"gracePeriodSeconds": 0})  # its kubelet
    cluster.scheduler.reconcile()
    assert cluster.get("urgent")["spec"]["nodeName"] == "node-a"


def test_a_nomination_holds_the_room_against_lower_priority_pods(cluster: Cluster) -> None:
    cluster.create("low", "3")
    cluster.scheduler.reconcile()
    cluster.create("urgent", "2", "high")
    cluster.scheduler.reconcile()
    cluster.admin.call("DELETE", "/api/v1/namespaces/default/pods/low", {"gracePeriodSeconds": 0})
    cluster.create("late", "3")  # older than nothing, lower than urgent: it must not take the freed room
    cluster.scheduler.reconcile()
    assert cluster.get("urgent")["spec"]["nodeName"] == "node-a" and not cluster.get("late")["spec"].get("nodeName")


def test_without_preemption_nothing_is_preempted(cluster: Cluster) -> None:
    plain = Scheduler(cluster.local.api, ("default-scheduler",))
    cluster.create("low", "3")
    plain.reconcile()
    cluster.create("urgent", "2", "high")
    plain.reconcile()
    assert "deletionTimestamp" not in cluster.get("low")["metadata"]
    assert "nominatedNodeName" not in cluster.get("urgent")["status"]
