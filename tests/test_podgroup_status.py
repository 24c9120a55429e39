"""A gang's PodGroup as the controller computes it (controller/status.py): phase, counts, reason and its short form,
conditions, spec; the times that must not move; only changed gangs computed again.

Each case builds the cluster a real one produces (pods as admission and the kubelet leave them) in the controller's
state, runs the engine's pass and computes the PodGroup from the pass, as the controller's loop does. Expectations
are the scenario's arithmetic (nodes of 4 cpu, members of so many cpu), spelled out next to each case.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import jsonschema
import pytest

from controller.engine import Cycle, Engine
from controller.state import ClusterState
from controller.status import (
    Desired,
    Phase,
    Tracker,
    merge_patch,
    new_podgroup,
    podgroup_name,
    short_resources,
    spec_for,
    status_for,
)
from gang.config import Config
from tests.support.contract import EXPECTED, GATE, GROUP, MIN, OWNER, OWNER_UID, PLANNED_NODE
from tests.support.podgroups import crd
from tests.support.state_objects import node, root, watch_roots

pytestmark = pytest.mark.unit

T0 = datetime.datetime(2026, 11, 22, 10, 0, tzinfo=datetime.UTC)
START = T0.timestamp()
ROOT = "kubeflow.org/v1/PyTorchJob/job"


def stamp(seconds: float) -> str:
    return (T0 + datetime.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def member(name: str, cpu: str = "1", *, size: int = 2, gated: bool = True, node_name: str = "", phase: str = "Pending",
           planned: str = "", created: float = 0.0, **spec: Any) -> dict[str, Any]:
    """A member of gang ``job`` (a PyTorchJob) as admission, the controller and the kubelet leave it."""
    annotations = {OWNER: ROOT, OWNER_UID: "root-uid"}
    if planned:
        annotations[PLANNED_NODE] = planned
    body: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **spec}
    if gated:
        body["schedulingGates"] = [{"name": GATE}]
    if node_name:
        body["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "creationTimestamp": stamp(created),
                         "labels": {GROUP: "job", MIN: str(size)}, "annotations": annotations},
            "spec": body, "status": {"phase": phase}}


def running(name: str, node_name: str, cpu: str = "1", size: int = 2, phase: str = "Running") -> dict[str, Any]:
    return member(name, cpu, size=size, gated=False, node_name=node_name, phase=phase, planned=node_name)


def busy(name: str, node_name: str, cpu: str = "2") -> dict[str, Any]:
    """A running member of another gang, holding ``cpu`` on ``node_name``."""
    obj = running(name, node_name, cpu, size=1)
    obj["metadata"]["labels"][GROUP] = "other"
    obj["metadata"]["annotations"][OWNER_UID] = "other-uid"
    return obj


def world(*pods: dict[str, Any], nodes: int = 2, cpu: str = "4", **config: Any) -> tuple[ClusterState, Engine]:
    state = ClusterState(config.pop("replacement_grace_seconds", 120.0))
    watch_roots(state, root("kubeflow.org/v1", "PyTorchJob", "job", "root-uid"))
    for i in range(nodes):
        state.upsert_node(node(f"n{i}", cpu=cpu))
    for obj in pods:
        state.upsert_pod(obj, START)
    return state, Engine(state, Config(**config))


def podgroup(state: ClusterState, engine: Engine, at: float = 1.0, tracker: Tracker | None = None) -> Desired:
    cycle: Cycle = engine.cycle(START + at)
    changed, _ = (tracker or Tracker()).update(cycle, state, START + at)
    [want] = changed
    return want


def job(state: ClusterState, engine: Engine, at: float = 1.0, tracker: Tracker | None = None) -> Desired:
    """The PodGroup of gang ``job`` (other gangs are in the state too)."""
    cycle: Cycle = engine.cycle(START + at)
    changed, _ = (tracker or Tracker()).update(cycle, state, START + at)
    return next(d for d in changed if d.key[1] == "job")


def conditions(want: Desired) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in want.status["conditions"]}


# --- phases, counts and the short reason, case by case ----------------------------------------------------------


def test_pending_while_members_are_missing() -> None:
    # min 3, one member exists
    state, engine = world(member("w-0", size=3))
    want = podgroup(state, engine)
    assert want.phase is Phase.PENDING
    assert want.status["waitingFor"] == "2 members"
    assert want.status["reason"] == "1/3 members present"
    assert {k: want.status[k] for k in ("members", "present", "gated", "released", "bound", "running")} == \
        {"members": 1, "present": 1, "gated": 1, "released": 0, "bound": 0, "running": 0}
    assert conditions(want) == {"Released": ("False", "MembersMissing"), "Schedulable": ("Unknown", "MembersMissing"),
                                "Starving": ("False", "NotStarving"), "TimedOut": ("False", "WithinTimeout"),
                                "Scheduled": ("Unknown", "NotReleased")}
    assert want.status["nodes"] == []
    assert want.min_member == 3 and want.name == "job"
    assert want.root is not None and (want.root.kind, want.root.name, want.root.uid) == ("PyTorchJob", "job",
                                                                                         "root-uid")


def test_waiting_for_capacity_names_the_short_resource() -> None:
    # 2 members x 3 cpu, two 4-cpu nodes, 2 cpu taken on one: complete, no plan now
    state, engine = world(busy("o-0", "n0"), member("w-0", "3"), member("w-1", "3"))
    want = job(state, engine)
    assert want.phase is Phase.WAITING
    assert want.status["waitingFor"] == "capacity: cpu", want.status["reason"]
    assert "3 cpu" in want.status["reason"]
    assert conditions(want)["Schedulable"] == ("False", "InsufficientCapacity")
    assert conditions(want)["Released"] == ("False", "Waiting")


def test_releasing_then_running_with_the_plans_nodes() -> None:
    # 2 members x 3 cpu on two 4-cpu nodes: one per node
    state, engine = world(member("w-0", "3"), member("w-1", "3"))
    tracker = Tracker()
    want = podgroup(state, engine, tracker=tracker)
    assert want.phase is Phase.RELEASING
    assert want.status["released"] == 2 and want.status["gated"] == 0
    assert want.status["waitingFor"] == "2 to bind"
    assert want.status["nodes"] == ["n0", "n1"]
    assert want.status["reason"] == "all 2 members fit on 2 node(s)"
    assert conditions(want)["Released"] == ("True", "Released")
    assert conditions(want)["Schedulable"] == ("True", "Released")
    state.upsert_pod(running("w-0", "n0", "3", phase="Pending"), START + 2)  # bound, not started
    want = podgroup(state, engine, 2, tracker)
    assert (want.phase, want.status["bound"], want.status["waitingFor"]) == (Phase.RELEASING, 1, "1 to bind")
    state.upsert_pod(running("w-0", "n0", "3"), START + 3)
    state.upsert_pod(running("w-1", "n1", "3"), START + 3)
    want = podgroup(state, engine, 3, tracker)
    assert want.phase is Phase.RUNNING
    assert (want.status["running"], want.status["waitingFor"]) == (2, "")
    assert want.status["reason"] == "2 of 2 members running"


def test_succeeded_once_min_member_succeeded_and_none_runs() -> None:
    state, engine = world(running("w-0", "n0"), running("w-1", "n1"))
    tracker = Tracker()
    assert podgroup(state, engine, 1, tracker).phase is Phase.RUNNING
    state.upsert_pod(running("w-0", "n0", phase="Succeeded"), START + 2)
    assert podgroup(state, engine, 2, tracker).phase is Phase.RUNNING, "ran whole, one still runs"
    state.upsert_pod(running("w-1", "n1", phase="Succeeded"), START + 3)
    want = podgroup(state, engine, 3, tracker)
    assert want.phase is Phase.SUCCEEDED
    assert (want.status["succeeded"], want.status["present"], want.status["running"]) == (2, 2, 0)
    assert want.status["reason"] == "2 of 2 members succeeded"


def test_failed_once_no_room_is_held_for_a_replacement() -> None:
    # both ran; w-1 fails: its room is held for a replacement for replacementGraceSeconds (60 s here)
    state, engine = world(running("w-0", "n0"), running("w-1", "n1"), replacement_grace_seconds=60.0)
    tracker = Tracker()
    assert podgroup(state, engine, 1, tracker).phase is Phase.RUNNING
    state.upsert_pod(running("w-1", "n1", phase="Failed"), START + 2)
    want = podgroup(state, engine, 3, tracker)
    assert want.phase is Phase.RUNNING, "ran whole, one still runs, a replacement may come"
    want = podgroup(state, engine, 70, tracker)  # 68 s after the failure > 60 s
    assert want.phase is Phase.FAILED
    assert (want.status["failed"], want.status["present"]) == (1, 1)
    assert "1 member failed; 1 of 2 left" in want.status["reason"]


def test_never_fits_and_not_certifiable() -> None:
    state, engine = world(member("w-0", "9"), member("w-1", "1"))  # no node has 9 cpu
    want = podgroup(state, engine)
    assert (want.phase, want.status["waitingFor"]) == (Phase.NEVER_FITS, "never fits")
    assert "9 cpu" in want.status["reason"]
    assert conditions(want)["Schedulable"] == ("False", "NeverFits")
    spread = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {GROUP: "job"}}}]
    state, engine = world(*(member(f"w-{i}", topologySpreadConstraints=spread) for i in range(2)))
    want = podgroup(state, engine)
    assert (want.phase, want.status["waitingFor"]) == (Phase.NOT_CERTIFIABLE, "not certifiable")
    assert conditions(want)["Released"] == ("False", "NotCertifiable")


def test_timed_out_while_waiting_longer_than_the_schedule_timeout() -> None:
    state, engine = world(busy("o-0", "n0"), member("w-0", "3"), member("w-1", "3"), schedule_timeout_seconds=10.0)
    assert conditions(job(state, engine, 5))["TimedOut"] == ("False", "WithinTimeout")
    want = job(state, engine, 11)
    assert conditions(want)["TimedOut"] == ("True", "ScheduleTimeout")
    assert want.phase is Phase.WAITING


def test_starving_with_its_shadow_plan() -> None:
    # 2 x 3 cpu wait on two 4-cpu nodes held by 2-cpu pods of a running gang; past starvation a shadow plan exists
    state, engine = world(busy("o-0", "n0"), busy("o-1", "n1"), member("w-0", "3"), member("w-1", "3"),
                          starvation_seconds=5.0)
    want = job(state, engine, 10)
    assert want.phase is Phase.WAITING
    assert conditions(want)["Starving"] == ("True", "ShadowPlan")
    assert want.status["shadowPlan"] == {"members": 2, "nodes": {"n0": 1, "n1": 1}}


def test_a_staged_gang_records_its_expected_members() -> None:
    # a driver announcing 4 executors of 1 cpu: min 5; released alone, the executors' room reserved
    driver = member("driver", size=5)
    driver["metadata"]["annotations"][EXPECTED] = json.dumps([{"role": "executor", "count": 4,
                                                               "requests": {"cpu": "1"}}])
    state, engine = world(driver)
    want = podgroup(state, engine)
    assert want.phase is Phase.RELEASING
    assert (want.expected_members, want.status["expected"], want.min_member) == (4, 4, 5)
    assert spec_for(want, {}) == {"minMember": 5, "expectedMembers": 4}
    assert want.status["waitingFor"] == "1 to bind"
    state.upsert_pod({**running("driver", "n0", size=5), "metadata": driver["metadata"] | {
        "annotations": driver["metadata"]["annotations"] | {PLANNED_NODE: "n0"}}}, START + 2)
    want = podgroup(state, engine, 2)
    assert (want.phase, want.status["running"], want.status["waitingFor"]) == (Phase.RELEASING, 1,
                                                                               "4 expected members")


def test_an_evicted_gang_is_pending_its_members_recreated() -> None:
    # w-0 runs without a release by this controller, w-1 cannot start with it (no room): after the bind timeout the
    # gang is evicted, and its PodGroup says it waits for its members to come back
    state, engine = world(member("w-0", "3", gated=False, node_name="n0", phase="Running"), member("w-1", "3"),
                          nodes=1, bind_timeout_seconds=5.0)
    tracker = Tracker()
    podgroup(state, engine, 1, tracker)
    want = podgroup(state, engine, 10, tracker)
    assert (want.phase, want.status["waitingFor"]) == (Phase.PENDING, "recreated members")
    assert conditions(want)["Released"] == ("False", "Evicted")


# --- spec, names, the resources a reason names -----------------------------------------------------------------


def test_spec_of_a_managed_podgroup() -> None:
    state, engine = world(member("w-0", priorityClassName="high"), member("w-1", priorityClassName="high"))
    want = podgroup(state, engine)
    assert spec_for(want, {"kubenexus.io/schedule-timeout-seconds": "90"}) == {
        "minMember": 2, "scheduleTimeoutSeconds": 90, "priorityClassName": "high"}
    assert spec_for(want, {"kubenexus.io/schedule-timeout-seconds": "0.5"})["scheduleTimeoutSeconds"] == 1
    assert "scheduleTimeoutSeconds" not in spec_for(want, {"kubenexus.io/schedule-timeout-seconds": "soon"})
    created = new_podgroup(want, {})
    assert created["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "job", "uid": "root-uid"}]
    assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kubenexus-gate-controller",
                                             "scheduling.kubenexus.io/root-kind": "pytorchjob",
                                             "scheduling.kubenexus.io/root-name": "job"}
    assert "status" not in created


@pytest.mark.parametrize(("group", "expected"), [
    ("resnet", "resnet"), ("spark-pi.nightly", "spark-pi.nightly"),
])
def test_a_valid_gang_name_is_the_podgroups_name(group: str, expected: str) -> None:
    assert podgroup_name(group) == expected


@pytest.mark.parametrize("group", ["My_Gang", "-x-", "a..b", "UPPER.case"])
def test_other_gang_names_become_valid_distinct_object_names(group: str) -> None:
    name = podgroup_name(group)
    assert name != group and len(name) <= 253
    assert all(part and part[0].isalnum() and part[-1].isalnum() for part in name.split("."))
    assert name == name.lower() and podgroup_name(group.lower() + "x") != name


@pytest.mark.parametrize(("reason", "short"), [
    ("4 members like w-0 need 2 cpu, 8Gi memory, 2 nvidia.com/gpu each; their 2 eligible nodes have room for only 2 "
     "(free nvidia.com/gpu alone allows no more)", ["nvidia.com/gpu"]),
    ("member w-0 needs 9 cpu; none of its 3 eligible nodes can hold it (the most free is 4 cpu)", ["cpu"]),
    ("the gang needs 16 nvidia.com/gpu on nodes matching its constraints; they have 8 nvidia.com/gpu free",
     ["nvidia.com/gpu"]),
    ("4 members like w-0 need 2 cpu each; their 3 eligible nodes have room for only 2", []),
    ("4 members like w-0 need 2 cpu each; their 3 eligible nodes have room for only 2 (the nodes' pod limits allow no "
     "more)", ["pods"]),
])
def test_short_resources_are_those_the_reason_says_fall_short(reason: str, short: list[str]) -> None:
    assert short_resources(reason, ["cpu", "memory", "nvidia.com/gpu", "pods"]) == short


# --- against the stored object: times that must not move ---------------------------------------------------------


def test_times_that_must_not_move_are_kept_and_transitions_stamped() -> None:
    state, engine = world(busy("o-0", "n0"), member("w-0", "3"), member("w-1", "3"))
    tracker = Tracker()
    waiting = job(state, engine, 1, tracker)
    first = status_for(waiting, None, 1, START + 1)
    assert first["scheduleStartTime"] == stamp(0), "the oldest member's creation"
    assert first["observedGeneration"] == 1 and "releasedAt" not in first
    assert {c["lastTransitionTime"] for c in first["conditions"]} == {stamp(1)}
    assert status_for(waiting, first, 1, START + 50) == first, "nothing changed: nothing to write"
    state.delete_pod("uid-o-0", START + 60)  # room for the second member: released
    released = job(state, engine, 60, tracker)
    second = status_for(released, first, 2, START + 60)
    assert second["scheduleStartTime"] == stamp(0) and second["releasedAt"] == stamp(60)
    times = {c["type"]: c["lastTransitionTime"] for c in second["conditions"]}
    assert times == {"Released": stamp(60), "Schedulable": stamp(60), "Starving": stamp(1), "TimedOut": stamp(1),
                     "Scheduled": stamp(60)}, "Starving and TimedOut kept their status (False): their times stay"
    assert {c["observedGeneration"] for c in second["conditions"]} == {2}
    state.upsert_pod(running("w-0", "n0", "3"), START + 70)
    third = status_for(job(state, engine, 70, tracker), second, 2, START + 70)
    assert third["releasedAt"] == stamp(60), "still released: releasedAt stays"


def test_merge_patch_nulls_what_is_gone_and_keeps_the_rest_out() -> None:
    current = {"phase": "Waiting", "present": 2, "shadowPlan": {"members": 2, "nodes": {"a": 1, "b": 1}},
               "nodes": ["a"]}
    wanted = {"phase": "Releasing", "present": 2, "nodes": ["a", "b"]}
    assert merge_patch(current, wanted) == {"phase": "Releasing", "nodes": ["a", "b"], "shadowPlan": None}
    assert merge_patch(wanted, wanted) == {}
    assert merge_patch({"shadowPlan": {"nodes": {"a": 1, "b": 1}}}, {"shadowPlan": {"nodes": {"a": 2}}}) == \
        {"shadowPlan": {"nodes": {"a": 2, "b": None}}}


# --- across passes ------------------------------------------------------------------------------------------------


def test_only_gangs_whose_inputs_changed_are_computed_again() -> None:
    state, engine = world(member("w-0", "3"), member("w-1", "3"), member("w-2", "3"), nodes=1)
    tracker = Tracker()
    changed, gone = tracker.update(engine.cycle(START + 1), state, START + 1)
    assert [d.key[1] for d in changed] == ["job"] and gone == []
    assert tracker.update(engine.cycle(START + 2), state, START + 2) == ([], []), "nothing changed"
    assert tracker.counts[Phase.NEVER_FITS] == 1, "2 x 3 cpu on one 4-cpu node"
    state.delete_pod("uid-w-2", START + 3)  # a member changed: computed again
    changed, _ = tracker.update(engine.cycle(START + 3), state, START + 3)
    assert [d.status["members"] for d in changed] == [2]
    for name in ("w-0", "w-1"):
        state.delete_pod(f"uid-{name}", START + 4)
    assert tracker.update(engine.cycle(START + 4), state, START + 4) == ([], [("ml", "job", "root-uid")])
    assert tracker.counts[Phase.NEVER_FITS] == 0 and not tracker.phases


def test_a_status_never_varies_with_time_alone() -> None:
    state, engine = world(busy("o-0", "n0"), member("w-0", "3"), member("w-1", "3"), schedule_timeout_seconds=1000.0)
    statuses = [job(state, engine, at).status for at in (1, 30, 200)]  # starving from 300 s on
    assert statuses[0] == statuses[1] == statuses[2]


# --- the contract: deploy/base/podgroup-crd.yaml ------------------------------------------------------------------


def _schemas(schema: Any) -> Any:
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _schemas(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _schemas(value)


def test_the_crd_schema_is_structural() -> None:
    """Every type is an OpenAPI type and every format one the apiserver knows (a typo makes the CRD invalid)."""
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    types = {s["type"] for s in _schemas(schema) if isinstance(s.get("type"), str)}
    assert types <= {"object", "array", "string", "integer", "number", "boolean"}, types
    formats = {s["format"] for s in _schemas(schema) if isinstance(s.get("format"), str)}
    assert formats <= {"int32", "int64", "date-time"}, formats


def test_what_the_controller_writes_validates_against_the_crd() -> None:
    """The objects of every phase above, created and with their status, against the CRD's schema."""
    validator = jsonschema.Draft7Validator(crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    driver = member("driver", size=5)
    driver["metadata"]["annotations"][EXPECTED] = json.dumps([{"role": "executor", "count": 4,
                                                               "requests": {"cpu": "1"}}])
    cases = [world(member("w-0", size=3)), world(busy("o-0", "n0"), member("w-0", "3"), member("w-1", "3")),
             world(member("w-0", "9"), member("w-1")), world(driver),
             world(busy("o-0", "n0"), busy("o-1", "n1"), member("w-0", "3"), member("w-1", "3"),
                   starvation_seconds=5.0, schedule_timeout_seconds=5.0)]
    phases = set()
    for state, engine in cases:
        want = job(state, engine, 10)
        obj = new_podgroup(want, {"kubenexus.io/schedule-timeout-seconds": "30"})
        obj["status"] = status_for(want, None, 1, START + 10)
        errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]
        assert not errors, (want.phase, errors)
        phases.add(want.phase)
    assert phases == {Phase.PENDING, Phase.WAITING, Phase.NEVER_FITS, Phase.RELEASING}
