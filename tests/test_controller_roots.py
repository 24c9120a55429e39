"""What a gang's root asks, as the controller knows it (controller/roots.py), and what the engine does with it: the
constraints or, when they cannot be known, why (never none); an opt-out edited onto a live job applies at once."""

from __future__ import annotations

from typing import Any

import pytest

from controller.announce import Announcer, count
from controller.engine import ROOT_LAG_SECONDS, Cause, Engine, GangDecision, Verdict
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


def told(announcer: Announcer, state: ClusterState, decision: GangDecision, at: float) -> list[tuple[str, str, bool]]:
    """(reason, type, to gated members too) of the Events the controller writes after this pass, recorded as
    written (``Controller._announce``)."""
    members = state.members(decision.key)
    tells = announcer.tells(decision, count(members), decision.key in state.whole, at)
    for tell in tells:
        announcer.told(decision.key, tell, at)
    return [(tell.reason, tell.type, tell.members) for tell in tells]


def test_a_root_not_seen_yet_holds_its_gang_quietly_then_past_the_lag_it_is_unknown_and_told() -> None:
    """A job's pods and its root come by two watches: for ROOT_LAG_SECONDS an unseen root is taken for a watch event
    on its way (Cause.ROOT_UNSEEN: held, not told, and no news while members are missing); past it, the gang's
    constraints are unknown (Cause.ROOT, GangConstraintsUnknown on the root and the gated members). Never released
    meanwhile, however much room there is; released once the root arrives."""
    state = ClusterState()
    state.upsert_node(node("a"))  # room for the whole gang
    watch_roots(state)  # every root resource listed, this job's root not delivered
    state.upsert_pod(member("w-0", gated=True))
    start = pod_view(member("w-0")).created  # the gang's wait starts with its oldest member
    engine, announcer = Engine(state, Config()), Announcer()
    unseen = "its root PyTorchJob ml/job is not in the gate controller's watch (deleted, or not seen yet)"

    cycle = engine.cycle(start + 1)
    (decision,) = cycle.gangs
    assert (decision.decision, decision.cause, decision.short) == (Verdict.WAIT, Cause.MEMBERS, 1), decision.reason
    assert told(announcer, state, decision, start + 1) == [("GangWaiting", "Normal", False)]
    state.upsert_pod(member("w-1", gated=True))
    for at in (start + 2, start + ROOT_LAG_SECONDS - 0.5):
        cycle = engine.cycle(at)
        (decision,) = cycle.gangs
        assert (decision.decision, decision.cause) == (Verdict.WAIT, Cause.ROOT_UNSEEN), decision.reason
        assert unseen in decision.reason and "it waits until they can be read" in decision.reason
        assert cycle.releases == [] and decision.plan == {}
        assert told(announcer, state, decision, at) == [], "a root a watch event away is no news"

    cycle = engine.cycle(start + ROOT_LAG_SECONDS)
    (decision,) = cycle.gangs
    assert (decision.decision, decision.cause) == (Verdict.WAIT, Cause.ROOT), decision.reason
    assert decision.reason == f"not planned: {unseen}: its constraints cannot be read; it waits until they can be read"
    assert cycle.releases == []
    assert told(announcer, state, decision, start + ROOT_LAG_SECONDS) == [
        ("GangConstraintsUnknown", "Warning", True)]
    later = engine.cycle(start + 600)
    assert later.releases == [] and later.gangs[0].cause == Cause.ROOT, "it never releases without its root"

    state.upsert_root("kubeflow.org", "PyTorchJob", root("kubeflow.org/v1", "PyTorchJob", "job", "root-1"))
    cycle = engine.cycle(start + 601)
    assert sorted(r.pod.name for r in cycle.releases) == ["w-0", "w-1"], cycle.gangs[0].reason


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


def test_taking_an_opt_out_back_leaves_the_pods_it_released_as_ordinary_pods() -> None:
    """Opted out, the gang's gated members went to ordinary scheduling; when the opt-out is removed again while they
    are still unbound, they are no escaped members to recreate: the controller released them itself."""
    state = ClusterState()
    state.upsert_node(node("a", cpu="1"))  # room for one: they stay unbound
    job = root("kubeflow.org/v1", "PyTorchJob", "job", "root-1")
    watch_roots(state, job)
    for i in range(2):
        state.upsert_pod(member(f"w-{i}", gated=True))
    engine = Engine(state, Config())
    engine.cycle(1e10)
    state.upsert_root("kubeflow.org", "PyTorchJob", {**job, "metadata": {
        **job["metadata"], "annotations": {"kubenexus.io/gang-scheduling": "false"}}})
    assert len(engine.cycle(1e10 + 1).releases) == 2
    for i in range(2):  # the PATCHes land: ungated, no planned node
        state.upsert_pod(member(f"w-{i}"))
    engine.cycle(1e10 + 2)
    state.upsert_root("kubeflow.org", "PyTorchJob", job)  # the opt-out taken back
    assert [e.pods for e in engine.cycle(1e10 + 3).evictions] == []
