"""A released gang ends whole or not at all: the engine's repairs, pass by pass, as the controller's state sees them.

Each test builds the situation a real cluster produces (other schedulers' pods binding onto planned nodes, a
kubelet rejecting a pod, an admin removing a gate, a crash half-way through a release, forged annotations) from
pod and node objects as the watch delivers them, runs the engine, and checks what it decides to release and to
evict. Expectations are the scenario's arithmetic, spelled out next to each assertion.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from controller.engine import Cycle, Engine, Verdict
from controller.state import ClusterState
from gang.config import Config
from tests.support.contract import EXPECTED, GROUP, MIN, OWNER_UID
from tests.support.state_objects import node, pod

pytestmark = pytest.mark.unit

T0 = datetime.datetime(2026, 11, 22, 10, 0, tzinfo=datetime.UTC)
START = T0.timestamp()
RESERVED = "scheduling.kubenexus.io/reserved-nodes"


def stamp(seconds: float) -> str:
    return (T0 + datetime.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def member(name: str, cpu: str, *, group: str = "job", size: int = 2, created: float = 0.0, pin: str = "",
           **kw: Any) -> dict[str, Any]:
    """A gang member as admission writes it; ``pin``: released by the controller onto that node (planned-node
    annotation and the node-affinity pin of its release PATCH)."""
    obj = pod(name, cpu, planned=pin, **kw)
    meta = obj["metadata"]
    meta["labels"] = {GROUP: group, MIN: str(size)}
    meta["annotations"][OWNER_UID] = f"root-{group}"
    meta["creationTimestamp"] = stamp(created)
    if pin:
        obj["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pin]}]}]}}}
    return obj


def other(name: str, cpu: str, *, node_name: str = "", created: float = 0.0, unschedulable: bool = False
          ) -> dict[str, Any]:
    """An ordinary pod of another scheduler (no gang)."""
    obj = pod(name, cpu, node_name=node_name, gang=False, phase="Running" if node_name else "Pending")
    obj["metadata"]["namespace"] = "web"
    obj["metadata"]["creationTimestamp"] = stamp(created)
    if unschedulable:
        obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return obj


def cluster(*nodes: str, cpu: str = "4", **config: Any) -> tuple[ClusterState, Engine]:
    state = ClusterState()
    for name in nodes:
        state.upsert_node(node(name, cpu=cpu))
    return state, Engine(state, Config(**config))


def run(engine: Engine, at: float) -> Cycle:
    return engine.cycle(START + at)


def decision(cycle: Cycle, group: str = "job") -> Any:
    return next(d for d in cycle.gangs if d.name == group)


def evicted(cycle: Cycle) -> list[tuple[str, bool, list[str]]]:
    return [(e.reason, e.whole_gang, sorted(p.name for p in e.pods)) for e in cycle.evictions]


def released(cycle: Cycle) -> dict[str, str]:
    return {r.pod.name: r.node for r in cycle.releases}


# --- released members that cannot bind -------------------------------------------------------------------------


def test_a_member_whose_planned_node_another_scheduler_filled_evicts_the_gang_that_never_ran_whole() -> None:
    # Nodes a, b of 4 cpu; gang job = 2 x 3 cpu, released onto a and b. w-0 bound on a; before w-1 binds, an
    # ordinary 2-cpu pod of another scheduler binds on b: 4 - 2 = 2 < 3, w-1 can never bind there.
    state, engine = cluster("a", "b")
    state.upsert_pod(member("w-0", "3", pin="a", node_name="a", phase="Running"), START)
    state.upsert_pod(member("w-1", "3", pin="b"), START)
    assert run(engine, 1).evictions == [], "nothing wrong yet: w-1 has its room"
    state.upsert_pod(other("web-0", "2", node_name="b"), START + 2)
    cycle = run(engine, 2)
    assert evicted(cycle) == [("unplaceable", True, ["w-0", "w-1"])]
    assert decision(cycle).decision == Verdict.EVICT
    assert decision(cycle).reason == "w-1 was released onto node b and needs 3 cpu; the pods bound there since leave " \
        "only 2 cpu"
    assert run(engine, 3).evictions == [], "decided once: the members are out of the gang's view until gone"


def test_a_member_that_does_not_bind_in_time_evicts_the_gang_only_when_part_of_it_runs() -> None:
    # bindTimeoutSeconds 30. Both members released at 0 s; nothing we can see stops them from binding.
    state, engine = cluster("a", "b", bind_timeout_seconds=30.0)
    state.upsert_pod(member("w-0", "1", pin="a"), START)
    state.upsert_pod(member("w-1", "1", pin="b"), START)
    assert run(engine, 31).evictions == [], "none runs: nothing is half started (the gang scheduler may be down)"
    state.upsert_pod(member("w-0", "1", pin="a", node_name="a", phase="Running"), START + 32)
    assert run(engine, 33).evictions == [], "the scheduler is back (it bound w-0): w-1's bind timeout counts from now"
    cycle = run(engine, 64)
    assert evicted(cycle) == [("bind-timeout", True, ["w-0", "w-1"])], "w-0 runs, w-1 unbound 31 s after that > 30 s"


def test_bind_timeout_counts_from_the_release() -> None:
    state, engine = cluster("a", "b", bind_timeout_seconds=30.0)
    state.upsert_pod(member("w-0", "1", pin="a", node_name="a", phase="Running"), START)
    state.upsert_pod(member("w-1", "1", pin="b"), START)
    assert run(engine, 29).evictions == [], "29 s < 30 s"
    cycle = run(engine, 31)
    assert evicted(cycle) == [("bind-timeout", True, ["w-0", "w-1"])]
    assert "w-1 was released 31s ago onto node b" in decision(cycle).reason


def test_a_member_the_kubelet_rejected_evicts_the_gang() -> None:
    state, engine = cluster("a", "b")
    state.upsert_pod(member("w-0", "3", pin="a", node_name="a", phase="Running"), START)
    rejected = member("w-1", "3", pin="b", node_name="b", phase="Failed")
    rejected["status"].update(reason="OutOfcpu", message="Pod was rejected: Node didn't have enough resource: cpu, "
                                                          "requested: 3000, used: 2000, capacity: 4000")
    state.upsert_pod(rejected, START)
    cycle = run(engine, 1)
    assert evicted(cycle) == [("rejected", True, ["w-0", "w-1"])]
    assert "OutOfcpu" in decision(cycle).reason


def test_a_cordoned_or_removed_planned_node_evicts_at_once_a_not_ready_one_waits_for_the_timeout() -> None:
    for change, expected in (("cordon", "unplaceable"), ("delete", "unplaceable"), ("not-ready", None)):
        state, engine = cluster("a", "b", bind_timeout_seconds=30.0)
        state.upsert_pod(member("w-0", "1", pin="a", node_name="a", phase="Running"), START)
        state.upsert_pod(member("w-1", "1", pin="b"), START)
        if change == "cordon":
            state.upsert_node(node("b", cpu="4", spec={"unschedulable": True}))
        elif change == "delete":
            state.delete_node("b")
        else:
            state.upsert_node(node("b", cpu="4", ready="False"))
        cycle = run(engine, 1)
        assert [e.reason for e in cycle.evictions] == ([expected] if expected else []), change
    assert evicted(run(engine, 31)) == [("bind-timeout", True, ["w-0", "w-1"])], "NotReady for 31 s > 30 s"


def test_a_gang_that_ran_whole_replaces_its_stuck_member_and_keeps_running() -> None:
    # job ran whole (both bound). w-1 fails; its replacement w-2 is released onto b; another scheduler's 3-cpu pod
    # binds on b first: only w-2 is deleted (its operator recreates it), w-0 keeps running.
    state, engine = cluster("a", "b", "c")
    state.upsert_pod(member("w-0", "3", pin="a", node_name="a", phase="Running"), START)
    state.upsert_pod(member("w-1", "3", pin="b", node_name="b", phase="Running"), START)
    assert ("ml", "job", "root-job") in state.whole
    state.upsert_pod(member("w-1", "3", pin="b", node_name="b", phase="Failed"), START + 10)
    state.upsert_pod(member("w-2", "3", pin="b", created=11), START + 11)
    state.upsert_pod(other("web-0", "3", node_name="b"), START + 12)
    cycle = run(engine, 12)
    assert evicted(cycle) == [("unplaceable", False, ["w-2"])]
    assert decision(cycle).decision == Verdict.RUNNING


def test_a_replacement_of_a_gang_that_ran_whole_waits_for_room_instead_of_going_without_a_plan() -> None:
    # Nodes a, b of 4 cpu, both members ran (3 cpu each). w-1 failed; b now runs another 3-cpu pod: its replacement
    # w-2 (3 cpu) has no room anywhere (a: 4 - 3 = 1, b: 4 - 3 = 1). It stays gated.
    state, engine = cluster("a", "b", replacement_grace_seconds=1.0)
    state.upsert_pod(member("w-0", "3", pin="a", node_name="a", phase="Running"), START)
    state.upsert_pod(member("w-1", "3", pin="b", node_name="b", phase="Running"), START)
    state.delete_pod("uid-w-1", START + 1)
    state.upsert_pod(other("web-0", "3", node_name="b"), START + 2)
    state.upsert_pod(member("w-2", "3", created=5, gated=True), START + 5)
    cycle = run(engine, 5)
    assert released(cycle) == {} and cycle.evictions == []
    assert "1 replacement(s) wait for room" in decision(cycle).reason


# --- half releases ------------------------------------------------------------------------------------------------


def test_a_release_half_done_before_a_crash_is_completed_on_a_plan_or_evicted_never_released_blind() -> None:
    # The old leader released w-0 onto a (bound) and died before w-1's PATCH. w-1 (3 cpu) is gated.
    state, engine = cluster("a", "b")
    state.upsert_pod(member("w-0", "3", pin="a", node_name="a", phase="Running"), START)
    state.upsert_pod(member("w-1", "3", gated=True), START)
    assert released(run(engine, 1)) == {"w-1": "b"}, "b has 4 free >= 3: completed on a plan"

    state, engine = cluster("a", "b")
    state.upsert_pod(member("w-0", "3", pin="a", node_name="a", phase="Running"), START)
    state.upsert_pod(member("w-1", "3", gated=True), START)
    state.upsert_pod(other("web-0", "2", node_name="b"), START)
    cycle = run(engine, 1)
    assert released(cycle) == {}, "b: 4 - 2 = 2 < 3 and a: 4 - 3 = 1: no room, and no release without a plan"
    assert evicted(cycle) == [("incomplete", True, ["w-0", "w-1"])]


def test_a_member_released_by_someone_else_is_an_escaped_member_not_the_signal_to_release_the_rest() -> None:
    # Gang of 3 x 6 cpu on two 4-cpu nodes: it never fits. An admin (allowed to remove the gate) ungates w-0.
    state, engine = cluster("a", "b")
    for i in range(3):
        state.upsert_pod(member(f"w-{i}", "6", size=3, gated=i != 0), START)
    cycle = run(engine, 1)
    assert released(cycle) == {}, "the others are not released"
    assert evicted(cycle)[0][:3] == ("escaped", False, ["w-0"]), "w-0 is recreated through admission, gated"
    assert (decision(cycle).decision, decision(cycle).reason) == (Verdict.WAIT, "2/3 members present"), \
        "w-0 is on its way"
    assert state.free("a")["cpu"] == 4 and state.free("b")["cpu"] == 4, "w-0 holds no room: we did not release it"


def test_a_bound_member_someone_else_released_counts_as_placed_and_the_gang_completes_around_it() -> None:
    # PyTorchJob of 4 x 2 cpu on two 4-cpu nodes. w-0 and w-1 escaped admission and run on a (joined to their gang:
    # labels, no planned node). w-2 and w-3 are gated: planned onto b (4 cpu = 2 x 2), not onto a (4 - 4 = 0).
    state, engine = cluster("a", "b")
    for i in range(2):
        state.upsert_pod(member(f"w-{i}", "2", size=4, node_name="a", phase="Running"), START)
    for i in range(2, 4):
        state.upsert_pod(member(f"w-{i}", "2", size=4, gated=True), START)
    cycle = run(engine, 1)
    assert released(cycle) == {"w-2": "b", "w-3": "b"}
    assert "all 2 members fit" in decision(cycle).reason


def test_members_running_without_their_gang_are_evicted_after_the_bind_timeout() -> None:
    # As above, but b is full: the gated half cannot start. After bindTimeoutSeconds the running half goes too.
    state, engine = cluster("a", "b", bind_timeout_seconds=30.0)
    state.upsert_pod(other("web-0", "4", node_name="b"), START)
    for i in range(2):
        state.upsert_pod(member(f"w-{i}", "2", size=4, node_name="a", phase="Running"), START)
    for i in range(2, 4):
        state.upsert_pod(member(f"w-{i}", "2", size=4, gated=True), START)
    first = run(engine, 0)
    assert decision(first).decision == Verdict.WAIT and first.evictions == []
    assert run(engine, 30).evictions == [], "30 s is not more than 30 s"
    cycle = run(engine, 31)
    assert evicted(cycle) == [("incomplete", True, ["w-0", "w-1", "w-2", "w-3"])]
    assert "2 of 4 members run without the gate controller's release" in decision(cycle).reason


# --- forged state ---------------------------------------------------------------------------------------------


def test_a_forged_planned_node_holds_no_room() -> None:
    # Two never-schedulable pods that are not gang members carry planned-node a and b (a user wrote it). The gang
    # of 2 x 3 cpu on two 4-cpu nodes must still be released.
    state, engine = cluster("a", "b")
    for where in ("a", "b"):
        forged = pod(f"forged-{where}", "3", planned=where, gang=False)
        forged["spec"]["nodeSelector"] = {"no-such": "label"}
        state.upsert_pod(forged, START)
    assert state.free("a")["cpu"] == 4 and state.free("b")["cpu"] == 4
    for i in range(2):
        state.upsert_pod(member(f"w-{i}", "3", gated=True), START)
    assert sorted(released(run(engine, 1)).values()) == ["a", "b"]


def test_forged_expected_members_are_capped_by_the_gang_size() -> None:
    # min-available 2: at most 1 member can be expected later. A forged annotation asks for 50 x 1 cpu.
    state, engine = cluster("a", "b")
    first = member("d-0", "1", size=2, gated=True)
    first["metadata"]["annotations"][EXPECTED] = json.dumps(
        [{"role": "executor", "count": 50, "requests": {"cpu": "1"}}])
    state.upsert_pod(first, START)
    cycle = run(engine, 1)
    assert decision(cycle).decision == Verdict.RELEASE, "d-0 + 1 expected x 1 cpu fit; 50 would not"
    assert len(decision(cycle).plan) == 2


# --- pods queued for other schedulers ---------------------------------------------------------------------------


def test_pods_queued_for_other_schedulers_that_could_take_the_planned_room_hold_the_release() -> None:
    # Nodes a, b, c, d of 4 cpu; gang of 4 x 3 cpu: one per node. A 2-cpu pod of another scheduler was created at
    # 0 s and is not bound yet: it fits every node (4 >= 2) but not beside a member (4 - 3 = 1 < 2).
    state, engine = cluster("a", "b", "c", "d", queued_pod_seconds=10.0)
    state.upsert_pod(other("web-0", "2", created=0), START)
    for i in range(4):
        state.upsert_pod(member(f"w-{i}", "3", size=4, gated=True), START)
    held = run(engine, 1)
    assert released(held) == {} and decision(held).cause == "queue"
    assert "1 pod(s) queued for other schedulers" in decision(held).reason and "web/web-0" in decision(held).reason
    state.upsert_pod(other("web-0", "2", node_name="a", created=0), START + 2)
    cycle = run(engine, 2)
    assert decision(cycle).decision == Verdict.WAIT and decision(cycle).cause == "capacity", "a: 4 - 2 = 2 < 3"


def test_queued_pods_that_are_old_unschedulable_or_harmless_do_not_hold_a_release() -> None:
    for name, pending in (("old", other("web-0", "2", created=-11)),  # created 12 s before, window 10 s
                          ("unschedulable", other("web-0", "2", unschedulable=True)),
                          ("fits beside", other("web-0", "1"))):  # 4 - 3 = 1 >= 1: no harm
        state, engine = cluster("a", "b", "c", "d", queued_pod_seconds=10.0)
        state.upsert_pod(pending, START)
        for i in range(4):
            state.upsert_pod(member(f"w-{i}", "3", size=4, gated=True), START)
        assert len(released(run(engine, 1))) == 4, name


# --- staged gangs -----------------------------------------------------------------------------------------------


def running_driver(cpu: str, executor_cpu: str) -> dict[str, Any]:
    """A Spark driver of gang ``app`` running on a, announcing one executor whose slot is on b."""
    driver = member("d", cpu, group="app", pin="a", node_name="a", phase="Running")
    driver["metadata"]["annotations"][EXPECTED] = json.dumps(
        [{"role": "executor", "count": 1, "requests": {"cpu": executor_cpu}}])
    driver["metadata"]["annotations"][RESERVED] = json.dumps(["b"])
    return driver


def test_a_slot_reserved_for_an_expected_member_moves_when_another_scheduler_takes_its_node() -> None:
    # Spark driver (2 cpu) released onto a and running; 1 executor of 3 cpu expected, its slot on b. Another
    # scheduler's 2-cpu pod binds on b: 4 - 2 = 2 < 3; a has 4 - 2 = 2 < 3 too. c has room: the slot moves there,
    # the gang is not evicted, and the executor, once created, is released onto c.
    state, engine = cluster("a", "b", "c")
    state.upsert_pod(running_driver("2", "3"), START)
    state.upsert_pod(other("web-0", "2", node_name="b"), START + 1)
    assert run(engine, 1).evictions == []
    state.upsert_pod(member("exec-1", "3", group="app", created=2, gated=True), START + 2)
    cycle = run(engine, 2)
    assert released(cycle) == {"exec-1": "c"}


def test_a_slot_with_no_other_node_to_go_to_evicts_the_staged_gang() -> None:
    state, engine = cluster("a", "b")
    state.upsert_pod(running_driver("1", "4"), START)
    state.upsert_pod(other("web-0", "2", node_name="b"), START + 1)
    state.upsert_pod(member("exec-1", "4", group="app", created=2, gated=True), START + 2)
    cycle = run(engine, 2)
    assert evicted(cycle) == [("unplaceable", True, ["d", "exec-1"])]
    assert "no other node has room" in decision(cycle, "app").reason


def test_a_late_member_stranded_in_its_slot_is_replaced_and_its_slot_moves_the_gang_stays() -> None:
    # Spark driver (2 cpu) runs on a; its executor (3 cpu) was released into its slot on b; before it binds,
    # another scheduler's 2-cpu pod binds on b (4 - 2 = 2 < 3). Evicting the whole gang would fail the
    # application; the driver makes executors again. Only the executor is deleted; the replacement goes to c.
    state, engine = cluster("a", "b", "c")
    state.upsert_pod(running_driver("2", "3"), START)
    state.upsert_pod(member("exec-1", "3", group="app", created=2, pin="b"), START + 2)
    state.upsert_pod(other("web-0", "2", node_name="b"), START + 3)
    cycle = run(engine, 3)
    assert evicted(cycle) == [("unplaceable", False, ["exec-1"])]
    state.delete_pod("uid-exec-1", START + 4)
    state.upsert_pod(member("exec-2", "3", group="app", created=5, gated=True), START + 5)
    assert released(run(engine, 5)) == {"exec-2": "c"}


def test_members_that_ran_alone_and_succeeded_count_the_rest_is_released_never_waits_for_ever() -> None:
    # A gang of 4 x 1 cpu: two members escaped admission, ran alone and succeeded; their Jobs' last two pods are
    # gated. The succeeded two cannot run again: waiting for 4 present would be waiting for ever.
    state, engine = cluster("a", "b")
    for i in range(2):
        state.upsert_pod(member(f"w-{i}", "1", size=4, node_name="a", phase="Succeeded"), START)
    for i in range(2, 4):
        state.upsert_pod(member(f"w-{i}", "1", size=4, gated=True), START)
    cycle = run(engine, 1)
    assert sorted(released(cycle)) == ["w-2", "w-3"] and cycle.evictions == []
