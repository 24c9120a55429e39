"""Room indexes and the engine's caches: cheap answers must be the answers a full plan would give.

The indexes say "certainly not" and "try these nodes first"; the caches keep a gang's "not yet" and
its parsed view until something it depends on changes. Each test changes one such thing and checks
that the next pass sees it, against the state's real accounting.
"""

from __future__ import annotations

import random
import re
from decimal import Decimal
from typing import Any

import pytest

from controller.engine import Engine, Verdict
from controller.fitting import slots_beside
from controller.rooms import RoomIndex, Rooms, prefix, room, shape_of
from controller.state import ClusterState
from gang.config import Config
from tests.support.contract import GATE, GROUP, MIN, OWNER_UID
from tests.support.state_objects import node, pod

pytestmark = pytest.mark.unit

D = Decimal


def test_room_is_the_tightest_resource_including_the_pod_slot() -> None:
    usage = {"cpu": D(2), "memory": D(4), "pods": D(1)}
    assert room(usage, {"cpu": D(9), "memory": D(100), "pods": D(110)}) == 4
    assert room(usage, {"cpu": D(9), "memory": D(100), "pods": D(3)}) == 3
    assert room(usage, {"cpu": D("1.9"), "memory": D(100), "pods": D(3)}) == 0
    assert room(usage, {"cpu": D(-2), "memory": D(100), "pods": D(3)}) == 0, "an overcommitted node holds none"
    assert room(usage, {"memory": D(100), "pods": D(3)}) == 0, "a resource the node lacks is zero"
    assert room({"cpu": D(0), "pods": D(1)}, {"pods": D(5)}) == 5, "a zero request does not count"
    with pytest.raises(ValueError):
        room({"cpu": D(0), "pods": D(0)}, {"cpu": D(4)})  # requests nothing, not even a pod slot


def test_slots_match_brute_force_through_random_updates() -> None:
    rng = random.Random(5)
    usage = {"cpu": D(3), "pods": D(1)}
    names = [f"n{i}" for i in range(30)]
    free = {n: {"cpu": D(rng.randrange(0, 20)), "pods": D(rng.randrange(0, 6))} for n in names}
    index = RoomIndex(usage, frozenset(names[:25]), sorted(names[:25]), free.__getitem__)
    for step in range(300):
        changed = rng.choice(names)
        free[changed] = {"cpu": D(rng.randrange(-3, 20)), "pods": D(rng.randrange(0, 6))}
        index.update(changed, free[changed])
        count = rng.randrange(1, 40)
        expected = sum(min(room(usage, free[n]), count) for n in names[:25])
        slots = index.slots(count)  # walks only as far as it needs to: exact below count
        assert slots == expected if expected < count else slots >= count, step
        assert {n: index.room_of(n) for n in names} == {n: room(usage, free[n]) if n in names[:25] else 0
                                                         for n in names}
        if step % 3 == 0:  # the heap is built on first use and then only fed by updates
            assert index.most("cpu") == max(free[n]["cpu"] for n in names[:25])
            assert index.most("nvidia.com/gpu") == 0


def test_slots_beside_held_room_never_undercount() -> None:
    """With room held for gangs on some nodes, the slots left: never fewer than a count node by node finds (a "no"
    that is wrong would keep a gang waiting), and exact enough to say "no" where held room takes the only room."""
    rng = random.Random(11)
    usage = {"cpu": D(3), "pods": D(1)}
    names = [f"n{i}" for i in range(30)]
    noes = 0
    for step in range(300):
        free = {n: {"cpu": D(rng.randrange(0, 20)), "pods": D(rng.randrange(0, 6))} for n in names}
        index = RoomIndex(usage, frozenset(names[:25]), sorted(names[:25]), free.__getitem__)
        held = {("ml", f"g{k}", "u"): {n: {"cpu": D(rng.randrange(0, 12)), "pods": D(rng.randrange(0, 3))}
                                       for n in rng.sample(names, rng.randrange(0, 8))} for k in range(3)}
        on = {n: {r: sum((per.get(n, {}).get(r, D(0)) for per in held.values()), D(0)) for r in usage} for n in names}
        count = rng.randrange(1, 40)
        expected = sum(min(room(usage, {r: free[n][r] - on[n][r] for r in usage}), count) for n in names[:25])
        slots = slots_beside(index, count, held, free.__getitem__)
        if slots < count:  # a "no": certain, and never fewer than there are
            assert expected <= slots, step
            noes += 1
    assert noes > 30  # the bound does say "no"


def test_prefix_is_the_shortest_run_in_order_covering_every_demand() -> None:
    a = RoomIndex({"cpu": D(1), "pods": D(1)}, frozenset("wxyz"), list("wxyz"), lambda n: {"cpu": D(2), "pods": D(9)})
    b = RoomIndex({"cpu": D(4), "pods": D(1)}, frozenset("wxyz"), list("wxyz"),
                  lambda n: {"cpu": D(4 if n == "z" else 2), "pods": D(9)})
    assert prefix("wxyz", {a: 3}) == ["w", "x"]
    assert prefix("wxyz", {a: 3, b: 1}) == ["w", "x", "z"], "y only has room for a demand already covered"
    assert prefix("wxyz", {b: 2}) == [], "not enough room anywhere: no prefix"


def member(name: str, cpu: str, **kw: Any) -> dict[str, Any]:
    obj = pod(name, cpu, gated=True, **kw)
    obj["metadata"]["labels"] = {GROUP: name.split("-")[0], MIN: "2"}
    obj["metadata"]["annotations"] = {OWNER_UID: f"root-{name.split('-')[0]}"}
    return obj


def engine_with(*nodes: dict[str, Any]) -> tuple[ClusterState, Engine]:
    state = ClusterState()
    for obj in nodes:
        state.upsert_node(obj)
    return state, Engine(state, Config())


def decision(engine: Engine, name: str) -> str:
    return next(d.decision for d in engine.cycle(1e10).gangs if d.name == name)


def test_rooms_follow_the_states_dirty_nodes_and_start_over_when_node_shapes_change() -> None:
    state, _ = engine_with(node("a", cpu="8"), node("b", cpu="8"))
    rooms = Rooms(state)
    usage = {"cpu": D(2), "pods": D(1)}
    both = frozenset({"a", "b"})  # the engine hands out one object per distinct node set
    index = rooms.index(shape_of("k", usage), both)
    assert index.slots(100) == 8 and index.rooms == {"a": 4, "b": 4}
    state.upsert_pod(pod("web-0", "5", node_name="a", phase="Running", gang=False))
    assert rooms.index(shape_of("k", usage), both) is index and index.rooms == {"a": 1, "b": 4}
    state.upsert_node(node("b", cpu="8", spec={"unschedulable": True}))
    fresh = rooms.index(shape_of("k", usage), frozenset({"a"}))
    assert fresh is not index and fresh.slots(100) == 1 and fresh.rooms == {"a": 1}


def test_an_index_looks_only_at_the_nodes_a_fitting_gang_needs() -> None:
    looked: list[str] = []
    names = [f"n{i:02d}" for i in range(50)]

    def free(n: str) -> dict[str, Decimal]:
        looked.append(n)
        return {"cpu": D(8), "pods": D(110)}

    index = RoomIndex({"cpu": D(2), "pods": D(1)}, frozenset(names), names, free)
    assert index.slots(10) >= 10 and looked == names[:3], "4 + 4 + 2: three nodes answer it"
    assert prefix(names, {index: 10}) == names[:3]
    assert index.slots(1000) == 200 and sorted(looked) == names, "certainly not: every node looked at, once"


def test_a_cached_not_yet_holds_until_room_frees_then_the_gang_goes() -> None:
    state, engine = engine_with(node("a", cpu="8"), node("b", cpu="8"))
    for name in ("web-0", "web-1"):
        state.upsert_pod(pod(name, "6", node_name="a" if name == "web-0" else "b", phase="Running", gang=False))
    for i in range(2):
        state.upsert_pod(member(f"big-{i}", "5"))
    assert decision(engine, "big") == Verdict.WAIT
    freed = state.freed
    # Something else takes room: nothing freed, the cached answer stands (and is still right).
    state.upsert_pod(pod("web-2", "1", node_name="a", phase="Running", gang=False))
    assert state.freed == freed and decision(engine, "big") == Verdict.WAIT
    # A status update that changes nothing a decision reads frees nothing either.
    state.upsert_pod(pod("web-2", "1", node_name="a", phase="Running", gang=False))
    assert state.freed == freed
    # web-1 finishes: room frees on b, and the next pass plans again and releases.
    state.upsert_pod(pod("web-1", "6", node_name="b", phase="Succeeded", gang=False))
    assert state.freed > freed
    assert decision(engine, "big") == Verdict.WAIT, "5 + 5 cpu: b has 8 free now, a still has 1"
    state.delete_pod("uid-web-2")
    state.delete_pod("uid-web-0")
    assert decision(engine, "big") == Verdict.RELEASE


def test_a_nomination_given_up_frees_room_for_a_cached_gang() -> None:
    state, engine = engine_with(node("a", cpu="8"))
    nominated = pod("urgent-0", "6", gang=False)
    nominated["spec"]["priority"] = 1000
    nominated["status"]["nominatedNodeName"] = "a"
    state.upsert_pod(nominated)
    for i in range(2):
        state.upsert_pod(member(f"duo-{i}", "3"))
    assert decision(engine, "duo") == Verdict.WAIT
    nominated["status"].pop("nominatedNodeName")
    state.upsert_pod(nominated)
    assert decision(engine, "duo") == Verdict.RELEASE


def test_a_binding_member_gives_up_its_reservation_and_the_gang_view_is_rebuilt() -> None:
    state, engine = engine_with(node("a", cpu="8"))
    for i in range(2):
        state.upsert_pod(member(f"duo-{i}", "3"))
    assert decision(engine, "duo") == Verdict.RELEASE
    version = state.gang_versions[("ml", "duo", "root-duo")]
    freed = state.freed
    bound = member("duo-0", "3", node_name="a", phase="Running")
    bound["spec"].pop("schedulingGates")
    state.upsert_pod(bound)
    assert state.gang_versions[("ml", "duo", "root-duo")] > version
    assert state.freed > freed, "reserved → bound: the unbound share of the node shrank"
    assert decision(engine, "duo") == Verdict.RUNNING, "the other member is released already: nothing to do"
    gates = [p.gates for p in state.members(("ml", "duo", "root-duo"))]
    assert tuple(sorted(gates)) == ((), (GATE,))


def test_feasibility_by_node_kind_is_feasibility_node_by_node() -> None:
    """The engine evaluates the filters once per node kind (nodes alike but for name and hostname
    label) unless a pod names nodes; either way the answer must be the filters' over every node object."""
    from controller.predicates import NodeInfo, PodInfo, feasible
    from tests.support.predicate_objects import GPU, expr, required
    from tests.support.predicate_objects import node as full_node

    rng = random.Random(3)
    state = ClusterState()
    objects = []
    for i in range(80):
        obj = full_node(f"n{i:02d}", labels={k: v for k, v in (("pool", rng.choice(["a", "b", None])),
                                                               ("zone", rng.choice(["1", "2"]))) if v},
                        taints=rng.choice([[], [GPU]]), unschedulable=rng.random() < 0.1,
                        ready=rng.choice(["True", "True", "True", "False"]),
                        allocatable=rng.choice([None, {"cpu": "8", "pods": "110", "nvidia.com/gpu": "2"}]))
        if rng.random() < 0.9:  # most nodes carry their hostname label, some under another name, some none
            obj["metadata"]["labels"]["kubernetes.io/hostname"] = obj["metadata"]["name"] if i % 7 else f"h{i}"
        state.upsert_node(obj)
        objects.append(obj)
    engine = Engine(state, Config())
    specs = [
        {},
        {"nodeSelector": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]},
        {"nodeSelector": {"kubernetes.io/hostname": "n05"}},
        {"nodeSelector": {"kubernetes.io/hostname": "h14"}},
        required({"matchExpressions": [expr("kubernetes.io/hostname", "NotIn", "n01", "n02")]}),
        required({"matchExpressions": [expr("kubernetes.io/hostname", "DoesNotExist")]},
                 {"matchExpressions": [expr("zone", "In", "2")]}),
        {"tolerations": [{"operator": "Exists"}], **required({"matchFields": [expr("metadata.name", "In", "n09")]})},
        {**required({"matchExpressions": [expr("pool", "In", "b")]}),
         "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
         "tolerations": [{"key": "gpu", "operator": "Exists"}]},
    ]
    kinds = {view.kind for view in state.nodes.values()}
    assert len(kinds) < len(state.nodes) * 3 / 4, "the nodes above must share kinds, or this tests nothing"
    for i, spec in enumerate(specs):
        usage = {"cpu": D(1), "pods": D(1)} | ({"nvidia.com/gpu": D(1)} if "containers" in spec else {})
        expected = feasible(PodInfo.of(spec, {r: v for r, v in usage.items() if r != "pods"}),
                            [NodeInfo.of(obj) for obj in objects])
        assert engine.feasibility.nodes(f"key-{i}", spec, usage) == frozenset(expected), spec


def test_the_resource_named_as_running_out_is_the_one_a_walk_over_every_node_finds() -> None:
    """The engine reads it from single-resource room indexes kept across passes; explain.limiting walks the
    nodes' free capacity. Through changing loads, a gang that does not fit: the reasons must agree, pass after pass."""
    from controller.explain import limiting

    rng = random.Random(9)
    # 12 nodes of 16 cpu and 6 pod slots; a member takes 3 cpu: 5 per empty node by cpu, 6 by slots.
    state, engine = engine_with(*(node(f"n{i:02d}", cpu="16", pods="6") for i in range(12)))
    for i in range(6):  # a 5-cpu pod on half the nodes: 3 members there, 48 in all
        state.upsert_pod(pod(f"load-{i}", "5", node_name=f"n{i:02d}", phase="Running", gang=False))
    size = 50  # the empty nodes would hold 60: a wait, not never-fits

    def new_gang(name: str) -> None:
        """A gang's "not yet" is kept until room frees, and its reason with it; a new gang is planned afresh,
        over the same room indexes (they are per member shape, not per gang)."""
        for uid in [uid for uid, p in state.pods.items() if p.gang]:
            state.delete_pod(uid)
        for i in range(size):
            obj = member(f"{name}-{i}", "3")
            obj["metadata"]["labels"][MIN] = str(size)
            state.upsert_pod(obj)

    usage = {"cpu": D(3), "pods": D(1)}
    named = {"pods": "(the nodes' pod limits allow no more)", "cpu": "(free cpu alone allows no more)"}
    seen, added = set(), []
    for step in range(60):
        # Tiny pods take slots, not cpu: two rounds over the nodes make slots run out (cpu does at first, neither
        # in between); then they come and go at random.
        if step < 24 or rng.random() < 0.5:
            added.append(f"tiny-{step}")
            where = step % 12 if step < 24 else rng.randrange(12)
            state.upsert_pod(pod(added[-1], "10m", node_name=f"n{where:02d}", phase="Running", gang=False))
        elif added:
            state.delete_pod(f"uid-{added.pop(rng.randrange(len(added)))}")
        new_gang(f"big{step}")
        got = next(d for d in engine.cycle(1e10).gangs if d.name == f"big{step}")
        assert got.decision == Verdict.WAIT, got.reason
        slots = int(re.search(r"room for only (\d+)", got.reason).group(1))
        expected = limiting(usage, [state.free(n) for n in state.nodes], slots)
        seen.add(expected)
        shown = [resource for resource, text in named.items() if text in got.reason]
        assert shown == ([expected] if expected else []), (step, expected, got.reason)
    assert {"pods", "cpu", ""} <= seen, "each resource, and neither alone, must run out at some step"
