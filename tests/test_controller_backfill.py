"""Backfill around a starving gang, over several passes of the controller's engine.

A gang that has waited past the starvation threshold holds a shadow plan over capacity that will
free up; lower-ranked gangs may only use what that plan leaves (its slack). ``simulate`` shows one
pass; these tests follow the state through binds and finishing pods, as the controller sees them,
and check that backfill never adds up to more than the slack, whether its pods are still reserved
or already bound.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from controller.engine import Engine, Verdict
from controller.state import ClusterState
from gang.config import Config
from tests.support.contract import GROUP, MIN, OWNER_UID
from tests.support.state_objects import node, pod

pytestmark = pytest.mark.unit

T0 = datetime.datetime(2026, 11, 22, 10, 0, tzinfo=datetime.UTC)
NOW = (T0 + datetime.timedelta(minutes=10)).timestamp()  # llm has waited 600 s, past the 300 s default


def member(name: str, cpu: str, group: str, size: int, minute: int, **kw: Any) -> dict[str, Any]:
    obj = pod(name, cpu, **kw)
    meta = obj["metadata"]
    meta["labels"] = {GROUP: group, MIN: str(size)}
    meta["annotations"] = {OWNER_UID: f"root-{group}"}
    meta["creationTimestamp"] = (T0 + datetime.timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")
    if "node_name" not in kw:
        obj["spec"]["nodeSelector"] = {"pool": "train"}
    return obj


def train_node(name: str) -> dict[str, Any]:
    obj = node(name, cpu="8", pods="110")
    obj["metadata"]["labels"]["pool"] = "train"
    return obj


def train_nodes(*names: str, etl: dict[str, str] | None = None) -> tuple[ClusterState, Engine]:
    """8-cpu train nodes, with a running ETL pod (not in any gang; it will finish) of ``etl[node]`` cpu."""
    state = ClusterState()
    for name in names:
        state.upsert_node(train_node(name))
    for name, cpu in (etl or {}).items():
        state.upsert_pod(pod(f"etl-{name}", cpu, node_name=name, phase="Running", gang=False), NOW)
    return state, Engine(state, Config())


def decisions(engine: Engine) -> dict[str, Any]:
    return {d.name: d for d in engine.cycle(NOW).gangs}


def bind(state: ClusterState, name: str, cpu: str, group: str, size: int, minute: int, where: str) -> None:
    """What the watch delivers once the scheduler has bound a released member."""
    state.upsert_pod(member(name, cpu, group, size, minute, node_name=where, phase="Running"), NOW)


def test_bound_backfill_still_counts_against_the_slack() -> None:
    # Two 8-cpu train nodes, each running a 6-cpu ETL pod that will finish. llm (2 x 6 cpu, oldest) starves:
    # its shadow plan takes 6 of 8 on each node, leaving 8 - 6 = 2 cpu of slack per node for later gangs.
    state, engine = train_nodes("a", "b", etl={"a": "6", "b": "6"})
    for i in range(2):
        state.upsert_pod(member(f"llm-{i}", "6", "llm", 2, 0, gated=True), NOW)
    state.upsert_pod(member("x1-0", "2", "x1", 1, 1, gated=True), NOW)
    state.upsert_pod(member("x2-0", "2", "x2", 1, 2, gated=True), NOW)

    first = decisions(engine)
    assert first["llm"].decision == Verdict.WAIT and "capacity is held for it on 2 node(s)" in first["llm"].reason
    # Free now: 8 - 6 = 2 per node, within the slack: one small gang per node.
    assert first["x1"].decision == first["x2"].decision == Verdict.RELEASE
    assert {first["x1"].plan["x1-0"], first["x2"].plan["x2-0"]} == {"a", "b"}
    x1_node = first["x1"].plan["x1-0"]
    other = "b" if x1_node == "a" else "a"

    # Both bind; the ETL pod next to x1 finishes: that node has 8 - 2 = 6 free, the other 8 - 6 - 2 = 0.
    bind(state, "x1-0", "2", "x1", 1, 1, x1_node)
    bind(state, "x2-0", "2", "x2", 1, 2, other)
    state.delete_pod(f"uid-etl-{x1_node}", NOW)
    state.upsert_pod(member("x3-0", "2", "x3", 1, 3, gated=True), NOW)
    second = decisions(engine)
    assert second["llm"].decision == Verdict.WAIT and "capacity is held for it on 2 node(s)" in second["llm"].reason
    # x3 fits the free 6 cpu, but bound x1 already uses the whole 2 cpu of slack there: 8 - 6 - 2 = 0.
    assert second["x3"].decision == Verdict.WAIT, second["x3"].plan

    # The other ETL pod finishes: 8 - 2 = 6 free on each node, llm goes whole.
    state.delete_pod(f"uid-etl-{other}", NOW)
    third = decisions(engine)
    assert third["llm"].decision == Verdict.RELEASE and sorted(third["llm"].plan.values()) == ["a", "b"]
    assert third["x3"].decision == Verdict.WAIT


def test_a_gang_released_ahead_of_a_starving_one_in_the_same_pass_does_not_erase_its_shadow_plan() -> None:
    # hi (priority 100) and llm (priority 0, starving) both want the train nodes. hi fits now and goes first in the
    # pass; its members are then reserved but not bound. They will finish like any running pod, so llm's shadow plan
    # over capacity that will free up still exists, in the same pass and in the next, after they bind.
    state, engine = train_nodes("a", "b")
    for i in range(2):
        state.upsert_pod(member(f"llm-{i}", "6", "llm", 2, 0, gated=True), NOW)
    hi = [member(f"hi-{i}", "4", "hi", 2, 5, gated=True) for i in range(2)]
    for obj in hi:
        obj["spec"]["priority"] = 100
        state.upsert_pod(obj, NOW)
    state.upsert_pod(member("x-0", "2", "x", 1, 6, gated=True), NOW)
    first = decisions(engine)
    assert first["hi"].decision == Verdict.RELEASE
    # llm is ranked first among the waiting by priority 0 = 0 and age, but after hi (priority 100).
    assert first["llm"].decision == Verdict.WAIT and "capacity is held for it on 2 node(s)" in first["llm"].reason
    # The slack llm leaves is 8 - 6 = 2 per node, and hi holds 4 of the 8 - 4 = 4 free now: x fits there.
    assert first["x"].decision == Verdict.RELEASE
    for name, where in first["hi"].plan.items():
        bind(state, name, "4", "hi", 2, 5, where)
    second = decisions(engine)
    assert second["llm"].decision == Verdict.WAIT and "capacity is held for it on 2 node(s)" in second["llm"].reason


def running_gang(state: ClusterState, where: str, extra_cpu: str) -> None:
    """el: min-available 2, both bound to ``where`` (2 cpu each); el-2 is a third, extra member, still gated."""
    for i in range(2):
        bind(state, f"el-{i}", "2", "el", 2, 0, where)
    state.upsert_pod(member("el-2", extra_cpu, "el", 2, 4, gated=True), NOW)


def test_an_extra_member_of_a_running_gang_goes_where_it_fits() -> None:
    state, engine = train_nodes("a", "b", etl={"b": "7"})
    running_gang(state, "a", "3")
    got = decisions(engine)["el"]
    # a: 8 - 2 - 2 = 4 >= 3; b: 8 - 7 = 1 < 3.
    assert got.decision == Verdict.RELEASE and got.plan == {"el-2": "a"} and got.released == ["el-2"]
    assert decisions(engine)["el"].decision != Verdict.RELEASE, "released once; the next pass sees it reserved"


def test_a_whole_waiting_gang_goes_before_an_extra_member() -> None:
    # One node with 8 - 2 - 2 = 4 cpu free. The extra el-2 (2 cpu) is optional; w (2 x 2 cpu) needs all 4.
    state, engine = train_nodes("a")
    running_gang(state, "a", "2")
    for i in range(2):
        state.upsert_pod(member(f"w-{i}", "2", "w", 2, 5, gated=True), NOW)
    got = decisions(engine)
    assert got["w"].decision == Verdict.RELEASE and got["w"].plan == {"w-0": "a", "w-1": "a"}
    assert got["el"].released == [] and state.free("a")["cpu"] == 0


def test_an_extra_member_stays_out_of_a_starving_gangs_room() -> None:
    # llm (2 x 7 cpu) starves for the two train nodes: its slack is 8 - 7 = 1 cpu per node. el runs on a (4 of
    # 8 cpu), so a has 4 free now; b runs a 7-cpu ETL pod, 1 free.
    state, engine = train_nodes("a", "b", etl={"b": "7"})
    for i in range(2):
        state.upsert_pod(member(f"llm-{i}", "7", "llm", 2, 0, gated=True), NOW)
    running_gang(state, "a", "2")
    got = decisions(engine)
    assert got["llm"].decision == Verdict.WAIT and "capacity is held for it on 2 node(s)" in got["llm"].reason
    assert got["el"].released == [], "el-2 (2 cpu) fits a's 4 free cpu, not its 1 cpu of slack"
    # 1-cpu extras fit the slack: one on a (then a's slack is spent), one on b (min(1 free, 1 slack)), then none.
    state.upsert_pod(member("el-3", "1", "el", 2, 5, gated=True), NOW)
    assert decisions(engine)["el"].plan == {"el-3": "a"}
    state.upsert_pod(member("el-4", "1", "el", 2, 6, gated=True), NOW)
    assert decisions(engine)["el"].plan == {"el-4": "b"}
    state.upsert_pod(member("el-5", "1", "el", 2, 7, gated=True), NOW)
    assert decisions(engine)["el"].released == []
