"""Gang preemption (controller/preemption.py), pass by pass and table-driven, the way kube-scheduler's preemption
tests are written: which units are evicted, whole, minimal, and only when the preemptor then fits.

Nodes of 4 cpu; "busy" pods are no gang's, bound; members of gangs are 1 cpu unless said; priorities small integers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller import preemption
from controller.engine import Cause, Engine, Verdict
from controller.members import pod_view
from controller.preemption import Unit, choose
from controller.state import ClusterState
from gang.config import Config
from tests.support.contract import EXPECTED, GROUP, MIN, OWNER_UID, PLANNED_NODE, RESERVED_NODES
from tests.support.state_objects import node, pod

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0


def busy(name: str, where: str, cpu: str, priority: int = 0, **meta: Any) -> dict[str, Any]:
    obj = pod(name, cpu, node_name=where, phase="Running", gang=False)
    obj["spec"]["priority"] = priority
    obj["metadata"].update(meta)
    return obj


def member(name: str, gang: str, size: int, cpu: str = "1", priority: int = 0, where: str = "",
           **spec: Any) -> dict[str, Any]:
    """A member of ``gang``: gated, or released onto and running on ``where``."""
    obj = pod(name, cpu, node_name=where, gated=not where, phase="Running" if where else "Pending")
    obj["metadata"]["labels"] = {GROUP: gang, MIN: str(size)}
    obj["metadata"]["annotations"] = {OWNER_UID: f"root-{gang}", **({PLANNED_NODE: where} if where else {})}
    obj["spec"].update(priority=priority, **spec)
    return obj


def world(nodes: int, *objects: dict[str, Any], **config: Any) -> tuple[ClusterState, Engine]:
    state = ClusterState()
    for i in range(nodes):
        state.upsert_node(node(f"n{i}", cpu="4"))
    for obj in objects:
        state.upsert_pod(obj, T0)
    return state, Engine(state, Config(**config))


def gang_decision(cycle: Any, name: str) -> Any:
    return next(d for d in cycle.gangs if d.name == name)


def evicted(cycle: Any) -> list[str]:
    return sorted(p.name for p in cycle.preemptions[0].victims for p in p.pods) if cycle.preemptions else []


# --- the order, table-driven ------------------------------------------------------------------------------------


def unit(name: str, priority: int, pods: int = 1, cpu: int = 1, node_name: str = "a", newest: float = 0.0,
         gang: bool = False, violations: int = 0, freed: dict[str, int] | None = None) -> Unit:
    from decimal import Decimal

    room = freed or {node_name: cpu}
    views = tuple(pod_view(busy(f"{name}-{i}", node_name, "1")) for i in range(pods))
    return Unit(name, views, priority, newest, ("ns", name, "u") if gang else None, violations,
                {where: {"cpu": Decimal(c)} for where, c in room.items()})


def cpu(value: int) -> dict[str, Any]:
    from decimal import Decimal

    return {"cpu": Decimal(value)}


CASES = [
    # (name, need on node a, free on a, units on a, victims)
    ("the lowest priority first", 2, 0, [unit("p5", 5, cpu=2), unit("p1", 1, cpu=2)], ["p1"]),
    ("a single pod over a gang of the same priority", 2, 0,
     [unit("g", 1, pods=2, cpu=2, gang=True), unit("p", 1, cpu=2)], ["p"]),
    ("fewer pods first", 2, 0, [unit("two", 1, pods=2, cpu=2), unit("one", 1, cpu=2)], ["one"]),
    ("the newest first among equals", 2, 0, [unit("old", 1, cpu=2, newest=1.0), unit("new", 1, cpu=2, newest=9.0)],
     ["new"]),
    ("one a PodDisruptionBudget protects last", 2, 0,
     [unit("protected", 0, cpu=2, violations=1), unit("free", 3, cpu=2)], ["free"]),
    ("as many as needed, no more", 3, 0, [unit("a", 1), unit("b", 1, newest=1.0), unit("c", 1, newest=2.0),
                                         unit("d", 1, newest=3.0)], ["b", "c", "d"]),
    ("nothing when the room is free", 2, 2, [unit("x", 0, cpu=2)], []),
    ("reprieved when a later victim made enough room", 3, 0,
     [unit("small", 0, cpu=1, newest=5.0), unit("big", 1, cpu=3)], ["big"]),
]


@pytest.mark.parametrize("name, need, free, units, victims", CASES, ids=[c[0] for c in CASES])
def test_the_victims_for_one_node(name: str, need: int, free: int, units: list[Unit], victims: list[str]) -> None:
    chosen = choose({"a": cpu(need)}, {"a": cpu(free)}, {"a": units})
    assert chosen is not None and sorted(u.name for u in chosen) == sorted(victims)


def test_a_gang_unit_frees_room_on_every_node_it_has_members_on() -> None:
    gang = unit("g", 0, pods=2, gang=True, freed={"a": 2, "b": 2})
    chosen = choose({"a": cpu(2), "b": cpu(2)}, {"a": cpu(0), "b": cpu(0)}, {"a": [gang], "b": [gang]})
    assert chosen == [gang], "one unit, both nodes"


def test_no_victims_when_the_units_on_a_node_cannot_make_the_room() -> None:
    assert choose({"a": cpu(4)}, {"a": cpu(0)}, {"a": [unit("small", 0, cpu=1)]}) is None


def _choose_by_equality(need: Any, free: Any, on_node: Any) -> list[Unit] | None:
    """``choose`` as first written (units compared field by field, reprieved by ``list.remove``): the reference its
    faster form must agree with."""
    from controller.capacity import add, fits, subtract

    freed: dict[str, Any] = {}
    chosen: list[Unit] = []
    for where_short in sorted(need):
        if fits(need[where_short], add(free.get(where_short, {}), freed.get(where_short, {}))):
            continue
        for candidate in sorted(on_node.get(where_short, ()), key=lambda u: u.importance):
            if candidate in chosen:
                continue
            chosen.append(candidate)
            for where, room in candidate.freed.items():
                freed[where] = add(freed.get(where, {}), room)
            if fits(need[where_short], add(free.get(where_short, {}), freed.get(where_short, {}))):
                break
        else:
            return None
    for candidate in sorted(chosen, key=lambda u: u.importance, reverse=True):
        without = {where: subtract(freed[where], room) for where, room in candidate.freed.items()}
        if all(fits(need[where], add(free.get(where, {}), without[where])) for where in without if where in need):
            chosen.remove(candidate)
            freed.update(without)
    return chosen


@pytest.mark.parametrize("seed", range(40))
def test_choose_agrees_with_its_first_form(seed: int) -> None:
    # Three nodes; single pods and gangs over two nodes, of mixed priorities, ages and budgets; random needs.
    import random

    rng = random.Random(seed)
    nodes = ["a", "b", "c"]
    units = []
    for k in range(rng.randrange(3, 12)):
        spread = rng.sample(nodes, rng.choice((1, 1, 2)))
        units.append(unit(f"u{k}", rng.randrange(3), pods=len(spread) + rng.randrange(2), gang=len(spread) > 1,
                          newest=float(rng.randrange(5)), violations=rng.choice((0, 0, 1)),
                          freed={where: rng.randrange(1, 4) for where in spread}))
    on_node = {node: [u for u in units if node in u.freed] for node in nodes}
    need = {node: cpu(rng.randrange(1, 6)) for node in rng.sample(nodes, rng.randrange(1, 4))}
    free = {node: cpu(rng.randrange(0, 3)) for node in nodes}
    expected = _choose_by_equality(need, free, on_node)
    chosen = choose(need, free, on_node)
    assert (chosen is None) == (expected is None)
    assert [u.name for u in chosen or ()] == [u.name for u in expected or ()]


@pytest.mark.parametrize("need, free, freed", [
    ({"cpu": 2}, {"cpu": 1}, {"cpu": 1}), ({"cpu": 2}, {"cpu": 1}, {}), ({"cpu": 0}, {"cpu": -3}, {}),
    ({"cpu": 1, "memory": 4}, {"cpu": 1}, {"memory": 4}), ({"cpu": 1, "memory": 4}, {"cpu": 1}, {"memory": 3}),
    ({"nvidia.com/gpu": 1}, {}, {}), ({"cpu": -1}, {}, {}), ({"cpu": 3}, {"cpu": 5}, {"cpu": -2})])
def test_room_beside_what_victims_free_is_counted_as_fits_counts_it(need: Any, free: Any, freed: Any) -> None:
    from decimal import Decimal

    from controller.capacity import add, fits
    from controller.preemption import _fits_beside

    need, free, freed = ({k: Decimal(v) for k, v in d.items()} for d in (need, free, freed))
    assert _fits_beside(need, free, freed) == fits(need, add(free, freed))


def test_a_gang_unit_is_of_its_highest_priority_and_newest_member_and_frees_room_where_they_are() -> None:
    from controller.preemption import unit_of

    objects = [member(f"g-{i}", "g", 3, "1", 1, where=where) for i, where in enumerate(("n0", "n0", "n1"))]
    objects[1]["spec"]["priority"] = 7
    objects[2]["metadata"]["creationTimestamp"] = "2026-11-22T11:00:00Z"
    views = [pod_view(obj) for obj in objects]
    found = unit_of(views, ("ml", "g", "root-g"), 0, {v.uid: v.node for v in views}.__getitem__)
    assert (found.name, found.priority, found.newest) == ("gang ml/g", 7, views[2].created)
    assert views[2].created > views[0].created
    assert {node: room["cpu"] for node, room in found.freed.items()} == {"n0": 2, "n1": 1}


def test_pods_of_at_least_the_preemptors_priority_are_no_candidates_and_a_gang_goes_whole() -> None:
    objects = [busy("p0", "n0", "1", 0), busy("p10", "n0", "1", 10), busy("p20", "n0", "1", 20),
               member("eq-0", "eq", 1, "1", 10, where="n0"),
               member("low-0", "low", 2, "1", 1, where="n0"), member("low-1", "low", 2, "1", 1, where="n1")]
    state, engine = world(2, *objects)
    units = engine.preemption._units(["n0"], 10, ("ml", "high", "root-high"))
    assert sorted(units) == ["gang ml/low", "pod ml/p0"]
    assert sorted(units["gang ml/low"].freed) == ["n0", "n1"], "all its members, on every node"


# --- pass by pass ---------------------------------------------------------------------------------------------------


def test_a_gang_preempts_a_lower_priority_gang_whole_and_starts_once_it_is_gone() -> None:
    # n0, n1 full of gang low (4 x 2 cpu, priority 1); high (2 x 4 cpu, priority 10) needs two empty nodes.
    low = [member(f"low-{i}", "low", 4, "2", 1, where=f"n{i // 2}") for i in range(4)]
    high = [member(f"high-{i}", "high", 2, "4", 10) for i in range(2)]
    state, engine = world(2, *low, *high)
    cycle = engine.cycle(T0 + 1)
    decision = gang_decision(cycle, "high")
    assert decision.decision == Verdict.WAIT and decision.cause == Cause.PREEMPTING, decision.reason
    assert evicted(cycle) == ["low-0", "low-1", "low-2", "low-3"], "all of it, never some"
    assert ("preempting 1 unit(s) of lower priority, 4 pod(s) in all (gang ml/low (priority 1, 4 pods))"
            in decision.reason)
    again = engine.cycle(T0 + 2)
    assert not again.preemptions and gang_decision(again, "high").cause == Cause.PREEMPTING, "no second round"
    for i in range(4):
        state.delete_pod(f"uid-low-{i}", T0 + 3)
    released = engine.cycle(T0 + 4)
    assert gang_decision(released, "high").decision == Verdict.RELEASE
    assert sorted(r.pod.name for r in released.releases) == ["high-0", "high-1"]


def test_a_preempted_gang_starts_whole_again_and_is_told_until_then() -> None:
    # As above, plus n2 of 4 cpu with 2 cpu taken by a pod of priority 20 (no victim): once high holds n0 and n1,
    # n2 has room for one of low's recreated members. They are a new start, not replacements in a running gang:
    # none is released until all four fit, and low's PodGroup keeps naming its preemptor meanwhile.
    low = [member(f"low-{i}", "low", 4, "2", 1, where=f"n{i // 2}") for i in range(4)]
    high = [member(f"high-{i}", "high", 2, "4", 10) for i in range(2)]
    state, engine = world(3, busy("keep", "n2", "2", 20), *low, *high)
    assert ("ml", "low", "root-low") in state.whole
    assert evicted(engine.cycle(T0 + 1)) == ["low-0", "low-1", "low-2", "low-3"]
    for obj in low:  # the DisruptionTarget patch comes back through the watch before the deletion
        obj["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                        "reason": "PreemptionByGangAdmission"}]
        state.upsert_pod(obj, T0 + 1.5)
    recreated = [member(f"low-new-{i}", "low", 4, "2", 1) for i in range(4)]
    for obj in recreated[:2]:  # the operator's first replacements arrive while the victims still terminate
        state.upsert_pod(obj, T0 + 2)
    engine.cycle(T0 + 2)
    for i in range(4):
        state.delete_pod(f"uid-low-{i}", T0 + 3)
    for obj in recreated[2:]:
        state.upsert_pod(obj, T0 + 3)
    cycle = engine.cycle(T0 + 4)
    assert sorted(r.pod.name for r in cycle.releases) == ["high-0", "high-1"]
    assert gang_decision(cycle, "low").decision == Verdict.WAIT, gang_decision(cycle, "low").reason
    assert "preempted by gang ml/high (priority 10)" in state.preempted[("ml", "low", "root-low")][0]


def test_only_what_helps_single_pods_of_the_lowest_priority_first() -> None:
    # high (1 x 3 cpu, priority 10). n0: 2 cpu of priority 5 and 2 of priority 1; n1: 2 cpu of priority 0, 1 of 9:
    # taking the priority-0 pod on n1 leaves 1 + 2 = 3 cpu there: one victim, the lowest.
    objects = [busy("p5", "n0", "2", 5), busy("p1", "n0", "2", 1), busy("p0", "n1", "2", 0), busy("p9", "n1", "1", 9),
               member("high-0", "high", 1, "3", 10)]
    state, engine = world(2, *objects)
    cycle = engine.cycle(T0 + 1)
    assert evicted(cycle) == ["p0"], gang_decision(cycle, "high").reason


def test_a_gang_that_cannot_fit_even_if_everything_lower_went_evicts_nothing_and_says_so() -> None:
    objects = [busy("p0", "n0", "4", 0), busy("p11", "n1", "4", 11), member("high-0", "high", 2, "4", 10),
               member("high-1", "high", 2, "4", 10)]
    state, engine = world(2, *objects)
    cycle = engine.cycle(T0 + 1)
    decision = gang_decision(cycle, "high")
    assert not cycle.preemptions and decision.cause == Cause.CAPACITY
    assert "preempting every pod of lower priority than 10 would not make room" in decision.reason, decision.reason


def counting_searches(engine: Engine) -> list[Any]:
    """The plans over the room preemption could make that ``engine`` searches for from now on."""
    searches: list[Any] = []
    plan_with_room = engine.fitting.plan_with_room

    def counted(*args: Any, **kwargs: Any) -> Any:
        searches.append(args)
        return plan_with_room(*args, **kwargs)

    engine.fitting.plan_with_room = counted  # type: ignore[method-assign]
    return searches


def test_a_futile_search_is_not_repeated_until_room_could_have_grown() -> None:
    """Members of 4 and 3 cpu; with p0 (priority 0) gone n0 holds either, not both, and the rest runs at priority
    11: no plan. That "no preemption helps" stands while nothing that could grow the room below its priority changed
    (a lower-priority pod arriving cannot): no plan is searched for again. Once the priority-11 pod on n1 goes, it
    is searched for at once, and the gang preempts p0."""
    objects = [busy("p0", "n0", "4", 0), busy("p11", "n1", "4", 11), member("high-0", "high", 2, "4", 10),
               member("high-1", "high", 2, "3", 10)]
    state, engine = world(3, *objects, busy("filler", "n2", "4", 11))
    searches = counting_searches(engine)
    first = gang_decision(engine.cycle(T0 + 1), "high")
    assert "would not make room" in first.reason and len(searches) == 1
    state.upsert_pod(busy("late", "n2", "0", 0), T0 + 2)  # a change, of lower priority: no room for the gang
    again = gang_decision(engine.cycle(T0 + 3), "high")
    assert again.reason == first.reason and len(searches) == 1
    state.delete_pod("uid-p11", T0 + 4)
    cycle = engine.cycle(T0 + 5)
    assert len(searches) > 1 and evicted(cycle) == ["p0"], gang_decision(cycle, "high").reason


def test_too_few_slots_for_a_class_of_members_is_futile_without_a_search() -> None:
    """Three members of 3 cpu, priority 10; the nodes hold 4 cpu each, one runs a priority-11 pod: even with every
    pod of lower priority gone, two such members fit at most (one per free node). Futile, said with those numbers,
    with no plan searched for; a fourth node and the gang preempts."""
    objects = [busy("p0", "n0", "4", 0), busy("q0", "n1", "2", 0), busy("p11", "n2", "4", 11)]
    objects += [member(f"big-{i}", "big", 3, "3", 10) for i in range(3)]
    state, engine = world(3, *objects)
    searches = counting_searches(engine)
    decision = gang_decision(engine.cycle(T0 + 1), "big")
    assert ("preempting every pod of lower priority than 10 would not make room: 3 of its members ask for cpu 3 each "
            "and the nodes they may use could hold 2 such member(s) at most") in decision.reason, decision.reason
    assert not searches and decision.cause == Cause.CAPACITY
    state.upsert_node(node("n3", cpu="4"))
    cycle = engine.cycle(T0 + 2)
    assert searches and evicted(cycle) == ["p0", "q0"], gang_decision(cycle, "big").reason


@pytest.mark.parametrize("case", ["equal priority", "preemptionPolicy Never", "preemption off"])
def test_no_preemption_for_equal_priority_never_or_when_off(case: str) -> None:
    spec = {"preemptionPolicy": "Never"} if case == "preemptionPolicy Never" else {}
    victim_priority = 10 if case == "equal priority" else 0
    objects = [busy("victim", "n0", "4", victim_priority), member("high-0", "high", 1, "4", 10, **spec)]
    state, engine = world(1, *objects, preemption=case != "preemption off")
    cycle = engine.cycle(T0 + 1)
    decision = gang_decision(cycle, "high")
    assert not cycle.preemptions and decision.decision == Verdict.WAIT
    assert ("its preemptionPolicy is Never" in decision.reason) == (case == "preemptionPolicy Never"), decision.reason


DAEMON = {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "d",
                                "controller": True}]}
# A static pod's mirror as the kubelet creates it: the config.mirror annotation, and owned by its Node.
MIRROR_OWNER = {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n0", "uid": "node-uid",
                                     "controller": True}]}
MIRROR_ANNOTATIONS = {"kubernetes.io/config.mirror": "5b7e1c0f", "kubernetes.io/config.source": "file",
                      "kubernetes.io/config.hash": "5b7e1c0f"}
NEVER_VICTIMS: dict[str, dict[str, Any]] = {
    "DaemonSet pod": DAEMON,
    "static pod (its mirror)": {**MIRROR_OWNER, "annotations": MIRROR_ANNOTATIONS},
    "mirror pod by its annotation alone": {"annotations": MIRROR_ANNOTATIONS},
    "mirror pod by its Node owner alone": MIRROR_OWNER,
    "terminating pod": {"deletionTimestamp": "2026-11-22T10:00:00Z"},
}


@pytest.mark.parametrize("case", [*NEVER_VICTIMS, "plain pod"])
def test_daemonset_static_and_terminating_pods_are_never_victims(case: str) -> None:
    """n0: the pod of ``case`` and "small" (1 cpu each, priority 0) and 2 cpu of priority 11; high (2 cpu,
    priority 10) fits only in place of the first two. With a plain pod they are its victims; the others never are,
    and small alone would not make room: nothing is evicted, and it says so."""
    candidate = busy("candidate", "n0", "1", 0, **NEVER_VICTIMS.get(case, {}))
    objects = [candidate, busy("small", "n0", "1", 0), busy("p11", "n0", "2", 11), member("high-0", "high", 1, "2", 10)]
    state, engine = world(1, *objects)
    assert state.pods["uid-candidate"].permanent == (case in NEVER_VICTIMS and case != "terminating pod")
    cycle = engine.cycle(T0 + 1)
    if case == "plain pod":
        assert evicted(cycle) == ["candidate", "small"], gang_decision(cycle, "high").reason
        return
    assert not cycle.preemptions and "would not make room" in gang_decision(cycle, "high").reason


def test_a_staged_gang_preempts_for_its_expected_members_too_and_they_get_the_room() -> None:
    """A Spark-like gang: its driver (1 cpu, priority 10) is all that exists, and announces 2 executors of 3 cpu.
    Every node runs a 4-cpu pod of priority 0. Room for the driver alone is one victim; the whole gang needs two
    nodes (driver + executor on one, the other executor on the other): two victims, and once they are gone the
    driver is released with the executors' slots reserved on exactly the nodes they freed. A later gang of priority
    0 (3 cpu) takes none of those slots; the executors, created later, are released into them."""
    driver = member("driver", "spark", 3, "1", 10)
    driver["metadata"]["annotations"][EXPECTED] = json.dumps(
        [{"role": "executor", "count": 2, "requests": {"cpu": "3"}}])
    state, engine = world(3, *(busy(f"p{i}", f"n{i}", "4", 0) for i in range(3)), driver)
    cycle = engine.cycle(T0 + 1)
    decision = gang_decision(cycle, "spark")
    assert decision.cause == Cause.PREEMPTING and not cycle.releases, decision.reason
    victims = evicted(cycle)
    assert len(victims) == 2, (victims, decision.reason)
    assert (cycle.preemptions[0].members, cycle.preemptions[0].nodes) == (3, 2)
    freed = {f"n{name[1:]}" for name in victims}
    for name in victims:
        state.delete_pod(f"uid-{name}", T0 + 2)
    (release,) = engine.cycle(T0 + 3).releases
    assert release.pod.name == "driver" and {release.node, *release.reserved_nodes} == freed, release
    assert len(release.reserved_nodes) == 2
    bound = member("driver", "spark", 3, "1", 10, where=release.node)  # the release lands, the driver runs
    bound["metadata"]["annotations"].update({EXPECTED: driver["metadata"]["annotations"][EXPECTED],
                                             RESERVED_NODES: json.dumps(release.reserved_nodes)})
    state.upsert_pod(bound, T0 + 4)
    state.upsert_pod(member("other-0", "other", 1, "3", 0), T0 + 4)
    cycle = engine.cycle(T0 + 5)
    assert not cycle.releases and not cycle.preemptions, gang_decision(cycle, "other").reason
    for i in range(2):
        state.upsert_pod(member(f"exec-{i}", "spark", 3, "3", 10), T0 + 6)
    cycle = engine.cycle(T0 + 7)
    assert sorted(r.node for r in cycle.releases) == sorted(release.reserved_nodes), cycle.releases


def test_the_room_its_victims_free_is_held_for_it() -> None:
    # high (2 x 4 cpu, priority 10) preempts gang low on n0, n1; meanwhile "mid" (1 x 4 cpu, priority 5) arrives:
    # once low is gone, high takes the room, not mid.
    low = [member(f"low-{i}", "low", 2, "4", 1, where=f"n{i}") for i in range(2)]
    state, engine = world(2, *low, *(member(f"high-{i}", "high", 2, "4", 10) for i in range(2)))
    assert evicted(engine.cycle(T0 + 1)) == ["low-0", "low-1"]
    state.upsert_pod(member("mid-0", "mid", 1, "4", 5), T0 + 2)
    state.delete_pod("uid-low-0", T0 + 3)  # one victim gone: its node is held for high
    cycle = engine.cycle(T0 + 4)
    assert not cycle.releases and gang_decision(cycle, "mid").decision == Verdict.WAIT
    state.delete_pod("uid-low-1", T0 + 5)
    assert sorted(r.pod.name for r in engine.cycle(T0 + 6).releases) == ["high-0", "high-1"]


def test_within_one_pass_a_later_gang_neither_takes_the_room_held_nor_preempts_the_same_victims() -> None:
    """high (4 cpu, priority 10) preempts p0 (2 cpu, priority 0) on n0, which then holds 4 cpu for it, its free 2
    cpu included. In the same pass, mid (2 cpu, priority 9) comes next: those free 2 cpu are held, p0 is another
    preemption's victim already, n1 runs priority 11: it is not released and preempts nothing."""
    objects = [busy("p0", "n0", "2", 0), busy("p11", "n1", "4", 11), member("high-0", "high", 1, "4", 10),
               member("mid-0", "mid", 1, "2", 9)]
    state, engine = world(2, *objects)
    cycle = engine.cycle(T0 + 1)
    assert [p.key[1] for p in cycle.preemptions] == ["high"] and evicted(cycle) == ["p0"]
    assert not cycle.releases, [r.pod.name for r in cycle.releases]
    assert gang_decision(cycle, "mid").decision == Verdict.WAIT


def test_past_the_search_budget_of_a_pass_a_gang_is_weighed_in_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two gangs that would each preempt a pod; the pass's budget is spent on the first (priority 10): the second
    (priority 9) says so, preempts nothing in that pass and preempts in the next, while the first waits for its
    victim."""
    monkeypatch.setattr(preemption, "SEARCH_SECONDS", 1e-9)
    objects = [busy("p0", "n0", "4", 0), busy("q0", "n1", "4", 0), member("high-0", "high", 1, "4", 10),
               member("mid-0", "mid", 1, "4", 9)]
    state, engine = world(2, *objects)
    first = engine.cycle(T0 + 1)
    assert [p.key[1] for p in first.preemptions] == ["high"]
    assert "its preemption is weighed in a later pass" in gang_decision(first, "mid").reason
    second = engine.cycle(T0 + 2)
    assert [p.key[1] for p in second.preemptions] == ["mid"] and evicted(second) == ["q0"]
    assert gang_decision(second, "high").cause == Cause.PREEMPTING


def test_members_of_different_priorities_are_not_certifiable() -> None:
    state, engine = world(1, member("m-0", "mixed", 2, "1", 10), member("m-1", "mixed", 2, "1", 0))
    decision = gang_decision(engine.cycle(T0 + 1), "mixed")
    assert decision.decision == Verdict.NOT_CERTIFIABLE and "different priorities (0, 10)" in decision.reason


def test_a_pod_budget_protects_is_preempted_last() -> None:
    objects = [busy("guarded", "n0", "4", 0, labels={"app": "db"}), busy("plain", "n1", "4", 3),
               member("high-0", "high", 1, "4", 10)]
    state, engine = world(2, *objects)
    state.upsert_budget({"metadata": {"namespace": "ml", "name": "db"},
                         "spec": {"selector": {"matchLabels": {"app": "db"}}}, "status": {"disruptionsAllowed": 0}})
    assert evicted(engine.cycle(T0 + 1)) == ["plain"], "a higher priority, but no budget forbids it"


def test_budgets_weigh_the_pods_of_their_own_namespace_only() -> None:
    def budget(namespace: str, app: str, allowed: int) -> dict[str, Any]:
        return {"metadata": {"namespace": namespace, "name": app},
                "spec": {"selector": {"matchLabels": {"app": app}}}, "status": {"disruptionsAllowed": allowed}}

    objects = [busy("a", "n0", "1", labels={"app": "db"}), busy("b", "n0", "1", labels={"app": "db"}),
               busy("c", "n0", "1", labels={"app": "db"}, namespace="other"),
               busy("w", "n0", "1", labels={"app": "web"}),
               busy("x", "n0", "1", labels={"app": "web"}, namespace="other")]
    state, _ = world(1, *objects)
    for obj in (budget("ml", "db", 1), budget("other", "db", 0), budget("ml", "web", 0)):
        state.upsert_budget(obj)
    a, b, c, w, x = (state.pods[f"uid-{name}"] for name in "abcwx")
    assert [state.violations(pods) for pods in ([a, b], [c], [x], [a, c], [a])] == [1, 1, 0, 1, 0]
    assert [p.name for p in state.covered(allowed=0, below=1)] == ["c", "w"]
    assert state.covered(allowed=0, below=0) == [], "all of priority 0"
    state.delete_budget(budget("other", "db", 0))
    assert (state.violations([c]), [p.name for p in state.covered(allowed=0, below=1)]) == (0, ["w"])
    assert sorted(state.budgets) == ["ml"], "a namespace without budgets is forgotten"


def test_a_topology_aware_gang_preempts_inside_one_domain() -> None:
    # Racks r1 = n0, n1 and r2 = n2, n3; every node full of priority-0 pods, r1's of one gang. high (2 x 4 cpu,
    # priority 10, one rack): the victims are the pods of one rack, and the plan lies in that rack.
    from tests.support.state_objects import root, watch_roots

    state = ClusterState()
    for i in range(4):
        obj = node(f"n{i}", cpu="4")
        obj["metadata"]["labels"]["example.com/rack"] = "r1" if i < 2 else "r2"
        state.upsert_node(obj)
    watch_roots(state, root("kubeflow.org/v1", "PyTorchJob", "high", "root-high",
                            {"kubenexus.io/topology-required": "example.com/rack"}))
    for i in range(4):
        state.upsert_pod(busy(f"b{i}", f"n{i}", "4", 0), T0)
    for i in range(2):
        high = member(f"high-{i}", "high", 2, "4", 10)
        high["metadata"]["annotations"]["scheduling.kubenexus.io/owner"] = "kubeflow.org/v1/PyTorchJob/high"
        state.upsert_pod(high, T0)
    cycle = Engine(state, Config()).cycle(T0 + 1)
    victims = evicted(cycle)
    assert victims in (["b0", "b1"], ["b2", "b3"]), (victims, gang_decision(cycle, "high").reason)


def test_after_a_restart_pods_preempted_earlier_and_still_terminating_are_waited_for() -> None:
    # A new leader knows nothing of the first round: the victim it preempted is still terminating (DisruptionTarget,
    # deletionTimestamp) on the only node; it must not pick another victim meanwhile.
    leaving = busy("victim", "n0", "2", 0, deletionTimestamp="2026-11-22T10:00:00Z")
    leaving["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                        "reason": "PreemptionByGangAdmission"}]
    state, engine = world(1, leaving, busy("other", "n0", "2", 0), member("high-0", "high", 1, "2", 10))
    cycle = engine.cycle(T0 + 1)
    decision = gang_decision(cycle, "high")
    assert not cycle.preemptions and decision.cause == Cause.PREEMPTING
    assert "still terminate on the nodes its plan needs" in decision.reason, decision.reason


# --- the choice among nodes, table-driven (kube-scheduler's TestPickOneNodeForPreemption) --------------------------


def aged(obj: dict[str, Any], created: str) -> dict[str, Any]:
    obj["metadata"]["creationTimestamp"] = created
    return obj


NODE_CASES = [
    # (name, 4-cpu nodes n0.., pods on them, the preemptor's members of 4 cpu each, the pods it evicts)
    ("fewest pods", 2, [busy("a", "n0", "2"), busy("b", "n0", "2"), busy("c", "n1", "4")], 1, ["c"]),
    ("the lowest highest priority, even with more pods", 2,
     [busy("high", "n0", "4", 5), busy("a", "n1", "2", 1), busy("b", "n1", "2", 1)], 1, ["a", "b"]),
    ("a pod over a gang's two", 2,
     [member("g-0", "g", 2, "2", where="n0"), member("g-1", "g", 2, "2", where="n0"), busy("p", "n1", "4")], 1, ["p"]),
    ("the newest", 2,
     [aged(busy("old", "n0", "4"), "2026-11-22T08:00:00Z"), aged(busy("new", "n1", "4"), "2026-11-22T09:00:00Z")],
     1, ["new"]),
    ("two members, on the nodes that cost least", 3,
     [busy("a", "n0", "2"), busy("b", "n0", "2"), busy("c", "n1", "4"), busy("d", "n2", "4")], 2, ["c", "d"]),
    ("no victim where room is free", 3, [busy("a", "n0", "4"), busy("b", "n1", "4")], 1, []),
]


@pytest.mark.parametrize("name, nodes, objects, size, victims", NODE_CASES, ids=[c[0] for c in NODE_CASES])
def test_the_nodes_whose_victims_cost_least(name: str, nodes: int, objects: list[dict[str, Any]], size: int,
                                            victims: list[str]) -> None:
    state, engine = world(nodes, *objects, *(member(f"hi-{i}", "hi", size, "4", 10) for i in range(size)))
    cycle = engine.cycle(T0 + 1)
    assert evicted(cycle) == victims, gang_decision(cycle, "hi").reason


def test_the_rounds_of_a_preemption_end_and_let_its_room_go() -> None:
    """An interloper (another scheduler's pod) takes the room each round's victims free: the preemptor preempts
    again, ``MAX_ROUNDS`` times in all, then says so, preempts nothing and holds no room; it starts once room frees."""
    state, engine = world(1, busy("low", "n0", "4"), member("hi-0", "hi", 1, "4", 10))
    gone = "low"
    for round_ in range(1, preemption.MAX_ROUNDS + 1):
        cycle = engine.cycle(T0 + 2 * round_)
        assert evicted(cycle) == [gone] and f"round {round_}" in gang_decision(cycle, "hi").reason
        state.delete_pod(f"uid-{gone}", T0 + 2 * round_ + 0.5)
        gone = f"interloper-{round_}"
        state.upsert_pod(busy(gone, "n0", "4", 5), T0 + 2 * round_ + 0.6)
    cycle = engine.cycle(T0 + 10)
    waits = gang_decision(cycle, "hi")
    assert not cycle.preemptions and waits.decision == Verdict.WAIT
    assert f"its {preemption.MAX_ROUNDS} rounds of preemption are used up" in waits.reason, waits.reason
    assert not engine.preemption.held().get(waits.key), "no room held for it any more"
    state.delete_pod(f"uid-{gone}", T0 + 11)
    assert [r.pod.name for r in engine.cycle(T0 + 12).releases] == ["hi-0"]
