"""A schedulerName no scheduler serves (controller/schedulers.py), pass by pass: released members nobody touches are
noticed after the bind timeout, hold no room, are not evicted for it, hold back the other gangs of that name (but one
probe), and everything resumes once a scheduler acts on a pod of that name.

Two 4-cpu nodes; gang ``job`` (root-1) of 2 x 2 cpu released onto node a; gang ``next`` (root-2) of 2 x 1 cpu waits.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.engine import Cause, Engine, Verdict
from controller.schedulers import PROBE_SECONDS
from controller.state import ClusterState
from gang.config import Config
from tests.support.contract import GROUP, MIN, OWNER_UID
from tests.support.state_objects import node, pod

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0
SCHEDULER = "kubenexus-scheduler"


def member(name: str, cpu: str, gang: str, **kw: Any) -> dict[str, Any]:
    obj = pod(name, cpu, **kw)
    obj["metadata"]["labels"] = {GROUP: gang, MIN: "2"}
    obj["metadata"]["annotations"][OWNER_UID] = f"root-{gang}"
    obj["spec"]["schedulerName"] = SCHEDULER
    return obj


def world() -> tuple[ClusterState, Engine]:
    state = ClusterState()
    for name in ("a", "b"):
        state.upsert_node(node(name, cpu="4"))
    for i in range(2):
        state.upsert_pod(member(f"job-{i}", "2", "job", planned="a"), T0)  # released onto a, never touched
    return state, Engine(state, Config(bind_timeout_seconds=30.0))


def decisions(engine: Engine, at: float) -> dict[str, Any]:
    cycle = engine.cycle(T0 + at)
    assert not cycle.evictions, cycle.evictions
    return {d.name: d for d in cycle.gangs} | {"releases": [r.pod.name for r in cycle.releases]}


def test_released_members_no_scheduler_touches_are_noticed_and_hold_no_room() -> None:
    state, engine = world()
    assert state.free("a")["cpu"] == 0, "released: their room is reserved"
    within = decisions(engine, 29)["job"]
    assert within.cause is None and SCHEDULER not in state.absent
    after = decisions(engine, 31)["job"]
    assert after.decision == Verdict.RUNNING and after.cause == Cause.NO_SCHEDULER
    assert f"no scheduler serves schedulerName {SCHEDULER!r}" in after.reason and "keep" in after.reason
    assert state.free("a")["cpu"] == 4, "they hold nothing while nobody can bind them"
    assert decisions(engine, 600)["job"].cause == Cause.NO_SCHEDULER, "never evicted for the bind timeout"


def test_other_gangs_of_that_name_are_held_until_a_scheduler_acts_then_released() -> None:
    state, engine = world()
    decisions(engine, 31)
    for i in range(2):
        state.upsert_pod(member(f"next-{i}", "1", "next", gated=True), T0 + 40)
    held = decisions(engine, 41)
    assert held["next"].decision == Verdict.WAIT and held["next"].cause == Cause.NO_SCHEDULER, held["next"].reason
    assert held["releases"] == [], "room for it, but it would be stranded too"
    state.upsert_pod(member("job-0", "2", "job", planned="a", node_name="a", phase="Running"), T0 + 50)  # bound
    back = decisions(engine, 51)
    assert SCHEDULER not in state.absent and back["job"].cause is None
    assert sorted(back["releases"]) == ["next-0", "next-1"]
    assert state.free("a")["cpu"] == 0 and state.free("b")["cpu"] == 2, "the stranded member holds its room again"


def test_a_scheduler_that_only_finds_no_node_is_there() -> None:
    state, engine = world()
    decisions(engine, 31)
    unschedulable = member("job-1", "2", "job", planned="a")
    unschedulable["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    state.upsert_pod(unschedulable, T0 + 35)
    decisions(engine, 36)
    assert SCHEDULER not in state.absent


def test_with_nothing_left_to_show_a_returning_scheduler_one_gang_is_released_as_a_probe() -> None:
    state, engine = world()
    decisions(engine, 31)
    for i in range(2):
        state.delete_pod(f"uid-job-{i}", T0 + 32)  # the stranded gang is gone: nothing left a scheduler could act on
        state.upsert_pod(member(f"next-{i}", "1", "next", gated=True), T0 + 32)
        state.upsert_pod(member(f"later-{i}", "1", "later", gated=True), T0 + 33)
    first = decisions(engine, 40)
    probe = first["releases"][0].rsplit("-", 1)[0]
    assert sorted(first["releases"]) == [f"{probe}-0", f"{probe}-1"], "one gang, the probe"
    assert first["next" if probe == "later" else "later"].cause == Cause.NO_SCHEDULER
    assert decisions(engine, 40 + PROBE_SECONDS + 1)["releases"] == [], "the probe itself is stranded: no other"


def test_a_partly_bound_gang_is_a_bind_timeout_not_an_absent_scheduler() -> None:
    state, engine = world()
    state.upsert_pod(member("job-0", "2", "job", planned="a", node_name="a", phase="Running"), T0)
    cycle = engine.cycle(T0 + 31)
    assert SCHEDULER not in state.absent
    assert [e.reason for e in cycle.evictions] == ["bind-timeout"]
