"""Queues in the decision pass (controller/quota.py): quota admission, borrowing within a cohort, fair-share order,
StrictFIFO, and gangs whose Queue cannot be told. Nodes of 8 cpu; members 1 cpu unless said; every expected figure
below is worked out in the comment above it from the Queues' specs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller import preemption
from controller.engine import Cause, Engine, Verdict
from controller.quota import MAX_SHARE
from controller.state import ClusterState
from gang.config import Config
from tests.support.contract import EXPECTED, GROUP, MIN, OWNER, OWNER_UID, RESERVED_NODES
from tests.support.state_objects import node, pod, root, watch_roots

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0


def member(name: str, gang: str, size: int, cpu: str = "1", where: str = "", namespace: str = "ml",
           priority: int = 0, created: str = "2026-11-22T10:00:00Z") -> dict[str, Any]:
    obj = pod(name, cpu, node_name=where, gated=not where, phase="Running" if where else "Pending")
    obj["metadata"].update(namespace=namespace, uid=f"uid-{namespace}-{name}", creationTimestamp=created,
                           labels={GROUP: gang, MIN: str(size)},
                           annotations={OWNER_UID: f"root-{namespace}-{gang}"})
    obj["spec"]["priority"] = priority
    return obj


def gang(name: str, size: int, cpu: str = "1", namespace: str = "ml", where: list[str] | None = None,
         **extra: Any) -> list[dict[str, Any]]:
    return [member(f"{name}-{i}", name, size, cpu, where[i] if where else "", namespace, **extra) for i in range(size)]


def queue(name: str, cpu: str, namespace: str = "", cohort: str = "", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"nominalQuota": {"cpu": cpu}, **spec}
    if namespace:
        body["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    if cohort:
        body["cohort"] = cohort
    return {"metadata": {"name": name, "creationTimestamp": "2026-11-22T09:00:00Z"}, "spec": body}


def world(nodes: int, queues: list[dict[str, Any]], *pods: dict[str, Any],
          namespaces: tuple[str, ...] = ("ml", "a", "b", "c")) -> tuple[ClusterState, Engine]:
    state = ClusterState()
    for i in range(nodes):
        state.upsert_node(node(f"n{i}", cpu="8"))
    state.queues.listing("")
    state.queues.listing_namespaces("")
    for name in namespaces:
        state.queues.upsert_namespace({"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}})
    for obj in queues:
        state.queues.upsert(obj)
    watch_roots(state)
    for obj in pods:
        state.upsert_pod(obj, T0)
    return state, Engine(state, Config())


def decision(cycle: Any, name: str, namespace: str = "ml") -> Any:
    return next(d for d in cycle.gangs if d.name == name and d.key[0] == namespace)


def released(cycle: Any) -> set[str]:
    return {f"{d.key[0]}/{d.name}" for d in cycle.gangs if d.decision == Verdict.RELEASE}


def test_quota_holds_a_gang_the_nodes_could_take_and_frees_it_when_usage_drops() -> None:
    # team (4 cpu) runs "first" (2 x 1 cpu on n0): usage 2; "second" (2 x 2 cpu) would make 6 > 4.
    state, engine = world(2, [queue("team", "4", "ml")], *gang("first", 2, where=["n0", "n0"]), *gang("second", 2, "2"))
    cycle = engine.cycle(T0 + 1)
    second = decision(cycle, "second")
    assert second.decision == Verdict.WAIT and second.cause == Cause.QUOTA
    assert second.reason == "queue team: cpu 2/4 nominal; the gang needs 4", second.reason
    assert decision(cycle, "first").queue == "team" and second.queue == "team"
    for i in range(2):
        state.delete_pod(f"uid-ml-first-{i}", T0 + 2)
    assert "ml/second" in released(engine.cycle(T0 + 3))


def test_no_queue_selecting_the_namespace_leaves_the_gang_as_it_was() -> None:
    state, engine = world(1, [queue("team", "1", "other")], *gang("free", 2, "2"))
    cycle = engine.cycle(T0 + 1)
    assert "ml/free" in released(cycle) and decision(cycle, "free").queue == ""


def test_borrowing_from_the_cohort_up_to_the_borrowing_limit() -> None:
    # a (4 cpu) and b (8 cpu, idle) in cohort research: a's 6 cpu gang borrows 2 of b's unused 8.
    queues = [queue("qa", "4", "a", "research"), queue("qb", "8", "b", "research")]
    state, engine = world(2, queues, *gang("big", 2, "3", "a"))
    assert "a/big" in released(engine.cycle(T0 + 1))
    # with borrowingLimit 1, 4 + 1 = 5 < 6
    limited = [queue("qa", "4", "a", "research", borrowingLimit={"cpu": "1"}), queue("qb", "8", "b", "research")]
    state, engine = world(2, limited, *gang("big", 2, "3", "a"))
    waits = decision(engine.cycle(T0 + 1), "big", "a")
    assert waits.cause == Cause.QUOTA
    assert waits.reason == "queue qa: cpu 0/4 nominal, borrowing limit 1; the gang needs 6", waits.reason


def test_a_cohort_lends_only_what_its_queues_do_not_use() -> None:
    # qb uses 7 of its 8: the cohort has 4 + 8 - 7 = 5 free; a's gang needs 6 (2 beyond its nominal, more than the
    # 5 - 4 = 1 qb does not use).
    queues = [queue("qa", "4", "a", "research"), queue("qb", "8", "b", "research")]
    state, engine = world(2, queues, *gang("busy", 7, "1", "b", where=["n1"] * 7), *gang("big", 2, "3", "a"))
    waits = decision(engine.cycle(T0 + 1), "big", "a")
    assert waits.cause == Cause.QUOTA
    assert waits.reason == "queue qa: cpu 0/4 nominal, cohort research has 5 to lend; the gang needs 6", waits.reason


def test_a_queue_whose_nominal_quota_was_lent_says_so() -> None:
    # qb (4) borrowed qa's 8: it uses 12. qa's 4 cpu gang is within qa's nominal, but the cohort has 0 free; qa
    # does not reclaim (reclaimWithinCohort: Never).
    queues = [queue("qa", "8", "a", "research", preemption={"reclaimWithinCohort": "Never"}),
              queue("qb", "4", "b", "research")]
    busy = gang("busy", 12, "1", "b", where=["n0"] * 8 + ["n1"] * 4)
    state, engine = world(3, queues, *busy, *gang("mine", 4, "1", "a"))
    waits = decision(engine.cycle(T0 + 1), "mine", "a")
    assert waits.cause == Cause.QUOTA
    assert waits.reason == ("queue qa: cpu 0/8 nominal, but cohort research has lent the rest: 0 free in the "
                            "cohort; the gang needs 4"), waits.reason


def test_usage_counts_terminating_members_and_room_held_for_members_to_come() -> None:
    # team 4 cpu: "leaving" (2 x 1 cpu) is terminating but still on n0: usage 2, so "next" (2 x 2 cpu) waits.
    leaving = gang("leaving", 2, where=["n0", "n0"])
    for obj in leaving:
        obj["metadata"]["deletionTimestamp"] = "2026-11-22T10:05:00Z"
    state, engine = world(1, [queue("team", "4", "ml")], *leaving, *gang("next", 2, "2"))
    assert decision(engine.cycle(T0 + 1), "next").cause == Cause.QUOTA


def test_strict_fifo_holds_a_queues_later_gangs_behind_its_head_and_no_other_queue() -> None:
    # qs (StrictFIFO, 4 cpu): "head" (2 x 3 cpu, oldest) never fits its quota; "small" (1 cpu) would.
    # qo (BestEffortFIFO, 4 cpu) likewise, and its small gang passes its head.
    queues = [queue("qs", "4", "a", queueingStrategy="StrictFIFO"), queue("qo", "4", "b")]
    pods = [*gang("head", 2, "3", "a", created="2026-11-22T09:00:00Z"), *gang("small", 1, "1", "a"),
            *gang("head", 2, "3", "b", created="2026-11-22T09:00:00Z"), *gang("small", 1, "1", "b")]
    state, engine = world(2, queues, *pods)
    cycle = engine.cycle(T0 + 1)
    held = decision(cycle, "small", "a")
    assert held.cause == Cause.QUOTA and held.reason == "queued behind gang a/head, the head of StrictFIFO queue qs"
    assert "b/small" in released(cycle)


def test_fair_sharing_splits_what_the_cohort_lends_by_weight() -> None:
    # lender (24 cpu, idle), light (weight 1) and heavy (weight 2), each 0 nominal, in cohort pool; each has a backlog
    # of 1 cpu gangs. All 24 cpu get borrowed, heavy's share (borrowed / 24 / 2) rising half as fast: 8 and 16.
    queues = [queue("lender", "24", "c", "pool"), queue("light", "0", "a", "pool"),
              queue("heavy", "0", "b", "pool", fairSharing={"weight": 2})]
    pods = [*(p for i in range(30) for p in gang(f"l{i:02}", 1, "1", "a")),
            *(p for i in range(30) for p in gang(f"h{i:02}", 1, "1", "b"))]
    state, engine = world(4, queues, *pods)
    cycle = engine.cycle(T0 + 1)
    got = released(cycle)
    assert (sum(1 for g in got if g.startswith("a/")), sum(1 for g in got if g.startswith("b/"))) == (8, 16)
    assert engine.quota.share("light") == 8 * 1000 // 24 and engine.quota.share("heavy") == 16 * 1000 // 24 // 2


def test_a_weight_zero_queue_that_borrows_has_the_largest_share() -> None:
    queues = [queue("lender", "8", "c", "pool"), queue("zero", "0", "a", "pool", fairSharing={"weight": 0})]
    state, engine = world(1, queues, *gang("one", 1, "1", "a"))
    engine.cycle(T0 + 1)
    assert engine.quota.share("zero") == MAX_SHARE


@pytest.mark.parametrize("case, expected", [
    ("named missing", "its root names Queue 'nope' (kubenexus.io/queue), which does not exist"),
    ("named, no Queue at all", "its root names Queue 'nope' (kubenexus.io/queue), which does not exist"),
    ("two select", "namespace ml is selected by 2 Queues (q1, q2)"),
    ("unreadable", "Queues cannot be read (HTTP 403: forbidden): its quota is unknown"),
])
def test_a_gang_whose_queue_cannot_be_told_waits_and_says_why(case: str, expected: str) -> None:
    queues = [queue("q1", "8", "ml"), queue("q2", "8", "ml") if case == "two select" else queue("q2", "8", "x")]
    if case == "named, no Queue at all":
        queues = []
    pods = gang("job", 2)
    if case.startswith("named"):
        for obj in pods:
            obj["metadata"]["annotations"][OWNER] = "kubeflow.org/v1/PyTorchJob/job"
    state, engine = world(1, queues, *pods)
    watch_roots(state, root("kubeflow.org/v1", "PyTorchJob", "job", "root-ml-job", {"kubenexus.io/queue": "nope"}))
    if case == "unreadable":
        state.queues.listing("HTTP 403: forbidden")
    waits = decision(engine.cycle(T0 + 1), "job")
    assert waits.decision == Verdict.WAIT and waits.cause == Cause.QUEUE_UNKNOWN
    assert expected in waits.reason, waits.reason


# --- preemption by Queue policy (controller/queue_preemption.py) ------------------------------------------------------


def victims(cycle: Any) -> list[str]:
    return sorted(f"{u.gang[0]}/{u.gang[1]}" for p in cycle.preemptions for u in p.victims)


def borrower(created_base: str = "2026-11-22T08:00:00Z") -> list[dict[str, Any]]:
    """qb's gangs: "base" (4 x 1 cpu, its nominal 4, older) and "borrowed" (8 x 1 cpu beyond it, newer)."""
    return [*gang("base", 4, "1", "b", where=["n0"] * 4, created=created_base),
            *gang("borrowed", 8, "1", "b", where=["n1"] * 8, created="2026-11-22T09:00:00Z")]


def test_reclaim_takes_the_borrowing_gang_whole_and_leaves_the_borrowers_nominal_share() -> None:
    # qa (8) and qb (4) in cohort research: qb uses 12 (base 4 + borrowed 8); qa's gang (4 x 1 cpu) is within qa's
    # nominal but the cohort has 12 - 12 = 0 free. The nodes have room (n2 is empty): quota alone holds it.
    # Taking "borrowed" (qb still borrows before it) frees 8: qa's 4 fit. "base" keeps running.
    queues = [queue("qa", "8", "a", "research"), queue("qb", "4", "b", "research")]
    state, engine = world(3, queues, *borrower(), *gang("mine", 4, "1", "a"))
    cycle = engine.cycle(T0 + 1)
    mine = decision(cycle, "mine", "a")
    assert mine.cause == Cause.PREEMPTING and "as its Queue qa allows 1 gang(s), 8 pod(s)" in mine.reason, mine.reason
    assert victims(cycle) == ["b/borrowed"]
    assert [p.name for p in cycle.preemptions[0].victims[0].pods] == [f"borrowed-{i}" for i in range(8)], "whole"


def test_reclaim_waits_for_the_next_pass_once_the_search_budget_is_spent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same reclaim with the pass's preemption searches already spent: nothing is taken in that pass, the gang
    says so, and reclaims in the next."""
    monkeypatch.setattr(preemption, "SEARCH_SECONDS", 0.0)
    queues = [queue("qa", "8", "a", "research"), queue("qb", "4", "b", "research")]
    state, engine = world(3, queues, *borrower(), *gang("mine", 4, "1", "a"))
    first = engine.cycle(T0 + 1)
    assert not first.preemptions and "its preemption is weighed in a later pass" in decision(first, "mine", "a").reason
    monkeypatch.setattr(preemption, "SEARCH_SECONDS", 1.0)
    assert victims(engine.cycle(T0 + 2)) == ["b/borrowed"]


@pytest.mark.parametrize("policy, priority", [("Never", 10), ("LowerPriority", 0)])
def test_no_reclaim_when_the_queues_policy_says_no(policy: str, priority: int) -> None:
    # as above; Never takes nothing, LowerPriority nothing of equal priority (all are 0 here unless said)
    queues = [queue("qa", "8", "a", "research", preemption={"reclaimWithinCohort": policy}),
              queue("qb", "4", "b", "research")]
    state, engine = world(3, queues, *borrower(), *gang("mine", 4, "1", "a", priority=priority))
    cycle = engine.cycle(T0 + 1)
    assert not cycle.preemptions and decision(cycle, "mine", "a").cause == Cause.QUOTA


def test_within_queue_a_higher_priority_gang_takes_a_lower_ones_quota() -> None:
    # team (4): "low" (4 x 1 cpu, priority 0) uses it all; "high" (2 x 1 cpu, priority 10) preempts it whole.
    # With withinQueue: Never it waits.
    for within, expected in (("LowerPriority", ["ml/low"]), ("Never", [])):
        queues = [queue("team", "4", "ml", preemption={"withinQueue": within})]
        state, engine = world(1, queues, *gang("low", 4, "1", where=["n0"] * 4), *gang("high", 2, "1", priority=10))
        assert victims(engine.cycle(T0 + 1)) == expected, within


def test_fair_sharing_preemption_settles_and_never_ping_pongs() -> None:
    # lender (8, idle), qa and qb (0 nominal each) in cohort pool: everything they run is borrowed.
    # qa runs a1 (4 x 1, older) and a2 (2 x 1, newer): 6 of the 8. qb's b1 (4 x 1) waits: 2 free.
    # qb's share with b1 = 4/8 = 500; qa's without a2 = 4/8 = 500: 500 <= 500, a2 goes (LessThanOrEqualToFinalShare).
    queues = [queue("lender", "8", "c", "pool"), queue("qa", "0", "a", "pool"), queue("qb", "0", "b", "pool")]
    pods = [*gang("a1", 4, "1", "a", where=["n0"] * 4, created="2026-11-22T08:00:00Z"),
            *gang("a2", 2, "1", "a", where=["n1"] * 2, created="2026-11-22T09:00:00Z"), *gang("b1", 4, "1", "b")]
    state, engine = world(3, queues, *pods)
    assert victims(engine.cycle(T0 + 1)) == ["a/a2"]
    for i in range(2):
        state.delete_pod(f"uid-a-a2-{i}", T0 + 2)
    assert "b/b1" in released(engine.cycle(T0 + 3))
    for obj in gang("b1", 4, "1", "b", where=["n2"] * 4):  # b1 binds and runs
        state.upsert_pod(obj, T0 + 4)
    for obj in gang("a2", 2, "1", "a", created="2026-11-22T09:10:00Z"):  # its operator recreates a2, gated
        state.upsert_pod(obj, T0 + 4)
    # a2 again: qa's share with it 6/8 = 750; qb's without b1 0: 750 > 0, no preemption back. It settles.
    for t in range(5, 10):
        cycle = engine.cycle(T0 + t)
        assert not cycle.preemptions and decision(cycle, "a2", "a").cause == Cause.QUOTA


def test_fair_sharing_preemption_never_takes_from_a_queue_whose_share_would_fall_below() -> None:
    # qa runs two gangs of 2: 4 of the lender's 8 borrowed, 4 free; qb's b1 (6) waits. qb's share with b1 would be
    # 6/8 = 750, qa's without one of its gangs 2/8 = 250: taking it would leave qa below qb, so nothing is taken.
    queues = [queue("lender", "8", "c", "pool"), queue("qa", "0", "a", "pool"), queue("qb", "0", "b", "pool")]
    pods = [*gang("a1", 2, "1", "a", where=["n0"] * 2), *gang("a2", 2, "1", "a", where=["n1"] * 2),
            *gang("b1", 6, "1", "b")]
    state, engine = world(3, queues, *pods)
    cycle = engine.cycle(T0 + 1)
    assert not cycle.preemptions and decision(cycle, "b1", "b").cause == Cause.QUOTA


def test_a_borrowers_gang_of_higher_priority_never_takes_a_lenders_gang_by_priority() -> None:
    # qa (8) and qb (4), cohort c, one 8-cpu node: qa's a1 (4 x 1, priority 0) runs within its nominal; qb's b1
    # (4 x 1, priority 10) fills qb's nominal. qb's b2 (2 x 1, priority 10) would borrow, and the node is full.
    # By priority alone b2 would evict a1, and a1 would then reclaim its nominal back from the borrower, round
    # after round. Gangs of Queues go only as the preemptor's Queue allows: a1 stays, and it settles.
    queues = [queue("qa", "8", "a", "c"), queue("qb", "4", "b", "c")]
    pods = [*gang("a1", 4, "1", "a", where=["n0"] * 4, created="2026-11-22T08:00:00Z"),
            *gang("b1", 4, "1", "b", where=["n0"] * 4, priority=10, created="2026-11-22T08:00:00Z"),
            *gang("b2", 2, "1", "b", priority=10, created="2026-11-22T09:00:00Z")]
    state, engine = world(1, queues, *pods)
    for t in range(1, 4):
        cycle = engine.cycle(T0 + t)
        b2 = decision(cycle, "b2", "b")
        assert not cycle.preemptions and b2.decision == Verdict.WAIT, b2.reason


def test_a_gang_in_a_queue_still_preempts_pods_of_no_gang_by_priority() -> None:
    # the same gang b2, the node's room held by a plain pod of priority 0 (no gang, no Queue): it goes
    plain = member("plain", "none", 1, "4", where="n0", namespace="c")
    del plain["metadata"]["labels"][GROUP], plain["metadata"]["labels"][MIN]
    queues = [queue("qa", "8", "a", "c"), queue("qb", "4", "b", "c")]
    state, engine = world(1, queues, plain, *gang("b1", 4, "1", "b", where=["n0"] * 4, priority=10),
                          *gang("b2", 2, "1", "b", priority=10))
    cycle = engine.cycle(T0 + 1)
    assert [u.name for p in cycle.preemptions for u in p.victims] == ["pod c/plain"], decision(cycle, "b2", "b").reason


def test_members_beyond_the_minimum_are_released_only_within_quota() -> None:
    # team (3): a gang of minMember 2 with 4 members of 1 cpu; two run: one more fits the quota, the fourth waits
    pods = [member(f"e-{i}", "e", 2, "1", where="n0" if i < 2 else "") for i in range(4)]
    state, engine = world(2, [queue("team", "3", "ml")], *pods)
    first = engine.cycle(T0 + 1)
    assert [r.pod.name for r in first.releases] == ["e-2"]
    assert "1 member(s) beyond its minimum wait for its Queue" in decision(first, "e").reason
    state.upsert_pod(member("e-2", "e", 2, "1", where="n0"), T0 + 1.5)
    again = engine.cycle(T0 + 2)
    assert not again.releases and engine.quota.queues["team"].usage == {"cpu": 3}


def test_a_staged_gangs_expected_members_count_in_its_queues_usage() -> None:
    # team (5): a driver (1 cpu, minMember 2) announces one executor of 3 cpu to come: it is admitted for 4, and
    # once released its queue counts 4 (1 running, 3 held for the executor): "next" (2 x 1 cpu) would make 6
    driver = member("d-0", "drv", 2, "1")
    driver["metadata"]["annotations"][EXPECTED] = json.dumps([{"role": "executor", "count": 1,
                                                               "requests": {"cpu": "3"}}])
    state, engine = world(2, [queue("team", "5", "ml")], driver)
    first = engine.cycle(T0 + 1)
    assert released(first) == {"ml/drv"}
    bound = member("d-0", "drv", 2, "1", where=first.releases[0].node)
    bound["metadata"]["annotations"] = {**driver["metadata"]["annotations"],
                                        RESERVED_NODES: json.dumps(list(first.releases[0].reserved_nodes))}
    state.upsert_pod(bound, T0 + 1.5)
    for obj in gang("next", 2, "1"):
        state.upsert_pod(obj, T0 + 1.6)
    nxt = decision(engine.cycle(T0 + 2), "next")
    assert nxt.cause == Cause.QUOTA and "cpu 4/5 nominal" in nxt.reason, nxt.reason


def test_a_running_gang_whose_root_cannot_be_read_keeps_its_queue() -> None:
    # a running gang whose root names Queue "named" (its namespace selects "nsq"): while its root cannot be read its
    # usage stays in "named", never moves to the Queue its namespace would give a root naming none
    pods = gang("job", 2, "1", where=["n0", "n0"])
    for obj in pods:
        obj["metadata"]["annotations"][OWNER] = "kubeflow.org/v1/PyTorchJob/job"
    state, engine = world(1, [queue("named", "8"), queue("nsq", "8", "ml")], *pods)
    job = root("kubeflow.org/v1", "PyTorchJob", "job", "root-ml-job", {"kubenexus.io/queue": "named"})
    watch_roots(state, job)
    engine.cycle(T0 + 1)
    assert engine.quota.queues["named"].usage == {"cpu": 2} and not engine.quota.queues["nsq"].usage
    state.delete_root("kubeflow.org", "PyTorchJob", job)  # deleted; its pods run until the garbage collector acts
    engine.cycle(T0 + 2)
    assert engine.quota.queues["named"].usage == {"cpu": 2} and not engine.quota.queues["nsq"].usage


def test_a_queue_without_a_cohort_over_its_quota_says_so_and_names_no_cohort() -> None:
    # team (2) has no cohort; a gang of 4 x 1 cpu runs (its quota was lowered since): 2 cpu above nominal
    state, engine = world(1, [queue("team", "2", "ml")], *gang("big", 4, "1", where=["n0"] * 4))
    engine.cycle(T0 + 1)
    status = engine.quota.status("team")
    assert status["borrowing"] == {"cpu": "2"}
    assert "using 2 cpu above its nominal quota without a cohort" in str(status["conditions"]), status


def test_members_beyond_the_minimum_of_a_gang_whose_queue_cannot_be_told_wait_and_say_why() -> None:
    # two Queues select the namespace: a running gang's extra member is not released, and its reason says why
    pods = [member(f"e-{i}", "e", 2, "1", where="n0" if i < 2 else "") for i in range(3)]
    state, engine = world(2, [queue("q1", "8", "ml"), queue("q2", "8", "ml")], *pods)
    cycle = engine.cycle(T0 + 1)
    assert not cycle.releases
    assert "1 member(s) beyond its minimum wait for its Queue: " in decision(cycle, "e").reason
