"""What a gang's root asks, as the controller knows it (controller/roots.py), and what the engine does with it: the
constraints or, when they cannot be known, why (never none); an opt-out edited onto a live job applies at once."""

from __future__ import annotations

from typing import Any

import pytest

from controller.engine import Cause, Engine, Verdict
from controller.members import pod_view
from controller.roots import NONE, Roots, Unknown
from controller.state import ClusterState
from gang.config import Config
from tests.support.contract import OWNER, OWNER_UID
from tests.support.state_objects import node, pod, root, watch_roots

pytestmark = pytest.mark.unit

OWNED = "kubeflow.org/v1/PyTorchJob/job"


def member(name: str, owner: str = OWNED, uid: str = "root-1", **kw: Any) -> dict[str, Any]:
    obj = pod(name, "1", **kw)
    obj["metadata"]["annotations"].update({OWNER: owner, OWNER_UID: uid})
    return obj


def test_a_gang_without_a_root_object_asks_for_nothing() -> None:
    bare = pod("bare", "1")  # explicit pod-group labels, no owner
    explicit = member("mine", owner="scheduling.kubenexus.io/v1alpha1/PodGroup/mine")
    assert Roots().constraints(pod_view(bare)) is NONE
    assert Roots().constraints(pod_view(explicit)) is NONE


def test_a_root_not_listed_yet_or_refused_is_unknown_with_why() -> None:
    roots = Roots()
    view = pod_view(member("w"))
    starting = roots.constraints(view)
    assert isinstance(starting, Unknown) and "has not listed them (not listed yet)" in starting.reason
    roots.watching("kubeflow.org", "v1", "PyTorchJob", "LIST /apis/kubeflow.org/v1/pytorchjobs: HTTP 403: forbidden")
    refused = roots.constraints(view)
    assert isinstance(refused, Unknown) and "HTTP 403" in refused.reason and not refused.unseen


def test_a_root_not_seen_or_of_another_uid_is_unknown_and_a_seen_one_gives_its_annotations() -> None:
    roots = Roots()
    roots.watching("kubeflow.org", "v1", "PyTorchJob", "")
    view = pod_view(member("w"))
    unseen = roots.constraints(view)
    assert isinstance(unseen, Unknown) and unseen.unseen and "PyTorchJob ml/job is not in" in unseen.reason
    roots.upsert("kubeflow.org", "PyTorchJob", root("kubeflow.org/v1", "PyTorchJob", "job", "root-0"))
    other = roots.constraints(view)
    assert isinstance(other, Unknown) and "another object" in other.reason
    asks = {"kubenexus.io/topology-required": "example.com/rack", "kubectl.kubernetes.io/last-applied": "{}"}
    roots.upsert("kubeflow.org", "PyTorchJob", root("kubeflow.org/v1", "PyTorchJob", "job", "root-1", asks))
    assert dict(roots.constraints(view)) == {"kubenexus.io/topology-required": "example.com/rack"}  # type: ignore


def test_a_gang_whose_root_cannot_be_read_waits_and_says_why() -> None:
    state = ClusterState()
    state.upsert_node(node("a"))
    state.roots.watching("kubeflow.org", "v1", "PyTorchJob", "LIST: HTTP 403: forbidden")
    for i in range(2):
        state.upsert_pod(member(f"w-{i}", gated=True))
    (decision,) = Engine(state, Config()).cycle(1e10).gangs
    assert decision.decision == Verdict.WAIT and decision.cause == Cause.ROOT and "HTTP 403" in decision.reason


def test_an_opt_out_on_a_live_job_releases_its_gated_members_to_ordinary_scheduling_at_once() -> None:
    state = ClusterState()
    state.upsert_node(node("a", cpu="1"))  # room for one: the gang of 2 can never fit
    watch_roots(state, root("kubeflow.org/v1", "PyTorchJob", "job", "root-1"))
    for i in range(2):
        state.upsert_pod(member(f"w-{i}", gated=True))
    engine = Engine(state, Config())
    assert [d.decision for d in engine.cycle(1e10).gangs] == [Verdict.NEVER_FITS]
    state.upsert_root("kubeflow.org", "PyTorchJob", root("kubeflow.org/v1", "PyTorchJob", "job", "root-1",
                                                         {"kubenexus.io/gang-scheduling": "false"}))
    cycle = engine.cycle(1e10 + 1)
    (decision,) = cycle.gangs
    assert decision.decision == Verdict.OPTED_OUT and decision.released == ["w-0", "w-1"]
    assert [(r.pod.name, r.node, r.pin) for r in cycle.releases] == [("w-0", "", False), ("w-1", "", False)]
    assert state.free("a")["cpu"] == 1, "nothing reserved for them"
    for i in range(2):  # the PATCHes land: ungated, no planned node
        state.upsert_pod(member(f"w-{i}"))
    later = engine.cycle(1e10 + 2)
    assert later.evictions == [] and later.releases == [], "not members that escaped their gang: it has none"
