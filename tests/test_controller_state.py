"""Capacity accounting: every pod is charged to at most one node, exactly once, through every transition."""

from __future__ import annotations

import copy
from decimal import Decimal

import pytest

from controller.state import ClusterState
from tests.support.state_objects import node, pod

pytestmark = pytest.mark.unit


def free_cpu(state: ClusterState, name: str) -> Decimal:
    return state.free(name).get("cpu", Decimal(0))


def free_slots(state: ClusterState, name: str) -> Decimal:
    return state.free(name).get("pods", Decimal(0))


def test_each_state_of_a_pod_is_charged_once():
    state = ClusterState()
    state.upsert_node(node("a"))
    state.upsert_node(node("b"))
    p = pod("w-0", "2", gated=True)
    state.upsert_pod(p)
    assert (free_cpu(state, "a"), free_cpu(state, "b")) == (8, 8), "a gated pod takes nothing"
    view = state.pods["uid-w-0"]
    state.reserve(view, "b")
    assert (free_cpu(state, "b"), free_slots(state, "b")) == (6, 9), "reserved in memory before any API write"
    released = pod("w-0", "2", planned="b")
    state.upsert_pod(released)
    assert free_cpu(state, "b") == 6 and "uid-w-0" not in state.pending, "the watch confirms: reserved, once"
    state.upsert_pod(pod("w-0", "2", planned="b", node_name="b", phase="Running"))
    assert (free_cpu(state, "b"), free_slots(state, "b")) == (6, 9), "bound: used on its node, once"
    assert state.unbound("b") == {"cpu": 0, "pods": 0}
    terminating = pod("w-0", "2", planned="b", node_name="b", phase="Running")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-22T10:05:00Z"
    state.upsert_pod(terminating)
    assert free_cpu(state, "b") == 6, "terminating pods count until they are gone"
    state.upsert_pod(pod("w-0", "2", planned="b", node_name="b", phase="Succeeded"))
    assert (free_cpu(state, "b"), free_slots(state, "b")) == (8, 10), "terminal pods count nothing"
    state.delete_pod("uid-w-0")
    assert free_cpu(state, "b") == 8 and not state.gangs


def test_a_pod_bound_elsewhere_than_planned_moves_its_charge():
    state = ClusterState()
    for name in ("a", "b"):
        state.upsert_node(node(name))
    state.upsert_pod(pod("w-0", "3", planned="a"))
    assert free_cpu(state, "a") == 5
    state.upsert_pod(pod("w-0", "3", planned="a", node_name="b", phase="Running"))
    assert (free_cpu(state, "a"), free_cpu(state, "b")) == (8, 5)


def test_pods_on_a_node_seen_before_the_node_are_counted_when_it_appears():
    state = ClusterState()
    state.upsert_pod(pod("x", "1500m", node_name="late", phase="Running", gang=False))
    state.upsert_node(node("late"))
    assert free_cpu(state, "late") == Decimal("6.5")
    bigger = node("late", cpu="16")
    state.upsert_node(bigger)
    assert free_cpu(state, "late") == Decimal("14.5")


def test_shape_version_changes_only_when_static_feasibility_may():
    state = ClusterState()
    state.upsert_node(node("a"))
    before = state.shape_version
    state.upsert_node(node("a", cpu="12"))
    assert state.shape_version == before, "a capacity change is not a shape change"
    state.upsert_node(node("a", cpu="12", spec={"unschedulable": True}))
    assert state.shape_version == before + 1
    state.upsert_node(node("a", cpu="12", spec={"unschedulable": True}, ready="False"))
    assert state.shape_version == before + 2


def test_a_running_member_that_fails_or_is_deleted_leaves_a_vacancy():
    state = ClusterState(replacement_grace=60)
    state.upsert_node(node("a"))
    state.upsert_pod(pod("w-0", "2", node_name="a", phase="Running"))
    state.upsert_pod(pod("w-1", "2", node_name="a", phase="Running"))
    state.upsert_pod(pod("w-0", "2", node_name="a", phase="Failed"), now=100)
    state.delete_pod("uid-w-1", now=110)
    key = ("ml", "job", "root-1")
    vacancies = state.live_vacancies(key, now=150)
    assert [(v.node, v.usage["cpu"], v.until) for v in vacancies] == [("a", 2, 160), ("a", 2, 170)]
    assert [v.until for v in state.live_vacancies(key, now=165)] == [170]
    assert state.live_vacancies(key, now=171) == []


def test_a_succeeded_member_or_a_non_member_leaves_no_vacancy():
    state = ClusterState()
    state.upsert_node(node("a"))
    state.upsert_pod(pod("w-0", "2", node_name="a", phase="Running"))
    state.upsert_pod(pod("w-0", "2", node_name="a", phase="Succeeded"))
    state.delete_pod("uid-w-0")
    state.upsert_pod(pod("web", "1", node_name="a", phase="Running", gang=False))
    state.delete_pod("uid-web")
    assert state.vacancies == {}


def test_daemonset_and_static_pods_are_permanent():
    state = ClusterState()
    state.upsert_node(node("a"))
    state.upsert_pod(pod("ds", "500m", node_name="a", phase="Running", gang=False, owner_kind="DaemonSet"))
    mirror = pod("static", "250m", node_name="a", phase="Running", gang=False)
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    state.upsert_pod(mirror)
    state.upsert_pod(pod("web", "1", node_name="a", phase="Running", gang=False, owner_kind="ReplicaSet"))
    assert state.permanent("a")["cpu"] == Decimal("0.75")
    assert free_cpu(state, "a") == Decimal("6.25")
    state.delete_pod("uid-ds")
    assert state.permanent("a")["cpu"] == Decimal("0.25")


def test_nominated_pods_are_listed_until_bound():
    state = ClusterState()
    state.upsert_node(node("a"))
    nominated = pod("hi", "4", gang=False)
    nominated["spec"]["priority"] = 1000
    nominated["status"]["nominatedNodeName"] = "a"
    state.upsert_pod(nominated)
    assert [(uid, prio, usage["cpu"]) for uid, prio, usage in state.nominated("a")] == [("uid-hi", 1000, 4)]
    bound = copy.deepcopy(nominated)
    bound["spec"]["nodeName"] = "a"
    state.upsert_pod(bound)
    assert list(state.nominated("a")) == [] and free_cpu(state, "a") == 4


def test_gang_index_follows_membership():
    state = ClusterState()
    state.upsert_pod(pod("w-0", "1", gated=True))
    state.upsert_pod(pod("w-1", "1", gated=True))
    key = ("ml", "job", "root-1")
    assert [p.name for p in state.members(key)] == ["w-0", "w-1"]
    state.delete_pod("uid-w-0")
    assert [p.name for p in state.members(key)] == ["w-1"]
    state.delete_pod("uid-w-1")
    assert key not in state.gangs


def test_an_ungated_pod_still_marked_scheduling_gated_is_queued_not_unschedulable():
    """The apiserver marks a gated pod PodScheduled=False, reason SchedulingGated; once someone else removes the gate
    that mark stays until a scheduler tries, so the pod is on its way to a node, not found unschedulable."""
    state = ClusterState()
    state.upsert_node(node("n1", "4"))
    marked = pod("other", "2", gang=False)
    marked["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
    tried = pod("tried", "2", gang=False)
    tried["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    state.upsert_pod(marked, 0.0)
    state.upsert_pod(tried, 0.0)
    assert set(state.in_flight) == {"uid-other"}
