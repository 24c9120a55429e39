"""Per-domain free totals kept by the state (``ClusterState.domain_sums``): after any sequence of binds, releases,
unbinds, deletions and node changes they equal a from-scratch sum over the state's free capacity; and the
never-fits proofs that share allocatable nodes between gang shapes see node and DaemonSet changes."""

from __future__ import annotations

import copy
import random
from decimal import Decimal
from typing import Any

import pytest

from controller.feasibility import Feasibility
from controller.problem import Member
from controller.state import ClusterState, DomainSums
from controller.topology import Topology
from tests.support.state_objects import node, pod

pytestmark = pytest.mark.unit

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"


def labelled(name: str, cpu: str, zone: str | None, rack: str | None) -> dict[str, Any]:
    obj = node(name, cpu=cpu, pods="20")
    for key, value in ((ZONE, zone), (RACK, rack)):
        if value is not None:
            obj["metadata"]["labels"][key] = value
    return obj


def from_scratch(state: ClusterState, key: str, reach: frozenset[str]) -> tuple[dict[str, list[str]],
                                                                                 dict[str, dict[str, Decimal]]]:
    """Each domain's nodes in reach and their free capacity summed, read off the state's nodes now."""
    nodes: dict[str, list[str]] = {}
    for name in sorted(reach & set(state.nodes)):
        value = state.nodes[name].info.labels.get(key)
        if value is not None:
            nodes.setdefault(value, []).append(name)
    totals = {domain: {r: sum((state.free(n).get(r, Decimal(0)) for n in names), Decimal(0))
                       for r in {r for n in names for r in state.free(n)}} for domain, names in nodes.items()}
    return nodes, totals


def check(state: ClusterState, key: str, reach: frozenset[str]) -> DomainSums:
    sums = state.domain_sums(key, reach)
    nodes, totals = from_scratch(state, key, reach)
    assert sums.nodes == nodes
    for domain, expected in totals.items():
        for resource in set(expected) | set(sums.totals[domain]):
            assert sums.totals[domain].get(resource, 0) == expected.get(resource, 0), (domain, resource)
    for resource in {r for t in totals.values() for r in t} | set(sums.total):
        assert sums.total.get(resource, 0) == sum((t.get(resource, 0) for t in totals.values()), Decimal(0))
    return sums


@pytest.mark.parametrize("seed", range(12))
def test_incremental_domain_sums_equal_a_recomputation(seed: int) -> None:
    rng = random.Random(seed)
    state = ClusterState()
    names = [f"n{i:02d}" for i in range(14)]
    nodes = {}
    for i, name in enumerate(names):
        zone = None if i % 7 == 6 else f"z{i % 3}"  # some nodes carry no zone: in no domain
        nodes[name] = labelled(name, str(rng.choice([4, 8, 16])), zone, f"r{i % 5}")
        state.upsert_node(nodes[name])
    reaches = [frozenset(names), frozenset(rng.sample(names, 9)), frozenset(names[:4])]
    pods: dict[str, dict[str, Any]] = {}
    kept = {(key, reach): check(state, key, reach) for key in (ZONE, RACK) for reach in reaches}
    incremental = 0
    for step in range(160):
        shape = state.shape_version
        action = rng.random()
        if action < 0.35 or not pods:  # a pod bound to a node (a gang member, or not; some DaemonSet pods)
            name = f"p{step}"
            pods[name] = pod(name, str(rng.choice([1, 2, 3])), node_name=rng.choice(names), phase="Running",
                             gang=rng.random() < 0.5, owner_kind=rng.choice(["", "", "DaemonSet"]))
            state.upsert_pod(pods[name])
        elif action < 0.5:  # a gated member released by the controller: reserved on its planned node
            name = f"p{step}"
            pods[name] = pod(name, "1", gated=True)
            view = state.upsert_pod(pods[name])
            state.reserve(view, rng.choice(names))
        elif action < 0.65:  # a pod finishes or fails: its room comes back
            name = rng.choice(sorted(pods))
            done = copy.deepcopy(pods[name])
            done["status"]["phase"] = rng.choice(["Succeeded", "Failed"])
            state.upsert_pod(done)
        elif action < 0.8:
            state.delete_pod(f"uid-{pods.pop(rng.choice(sorted(pods)))['metadata']['name']}")
        elif action < 0.9:  # a node's allocatable changes (its shape does not)
            name = rng.choice(names)
            nodes[name] = copy.deepcopy(nodes[name])
            nodes[name]["status"]["allocatable"]["cpu"] = str(rng.choice([4, 8, 16, 32]))
            state.upsert_node(nodes[name])
        elif action < 0.96:  # a node moves to another zone: domains are built again
            name = rng.choice(names)
            nodes[name] = copy.deepcopy(nodes[name])
            nodes[name]["metadata"]["labels"][ZONE] = f"z{rng.randrange(4)}"
            state.upsert_node(nodes[name])
        else:  # a node leaves and comes back
            name = rng.choice(names)
            state.delete_node(name)
            state.upsert_node(nodes[name])
        for key in (ZONE, RACK):
            for reach in reaches:
                sums = check(state, key, reach)
                if state.shape_version == shape:  # kept current in place, not summed again
                    assert sums is kept[(key, reach)]
                    incremental += 1
                kept[(key, reach)] = sums
    assert incremental > 100 * 6  # most steps were checked on sums updated in place


def test_an_equal_node_set_made_later_finds_the_kept_sums_and_is_kept_under_it() -> None:
    """Node sets are interned per engine: a later engine's set equal to one the sums were kept for finds them (not
    summed again), is kept under its own object from then on, and the sums stay current for either object."""
    state = ClusterState()
    names = ["n1", "n2", "n3"]
    for name, zone in zip(names, ("a", "a", "b"), strict=True):
        state.upsert_node(labelled(name, "8", zone, None))
    first, later = frozenset(names), frozenset(list(names))
    assert first == later and first is not later
    kept = check(state, ZONE, first)
    found = check(state, ZONE, later)
    assert found.totals is kept.totals and found.reach is later
    assert state.domain_sums(ZONE, later) is found  # kept under the later object now: found by identity
    state.upsert_pod(pod("p1", "3", node_name="n1", phase="Running"))
    check(state, ZONE, later)
    assert check(state, ZONE, first).totals is kept.totals


def test_never_fits_shares_allocatable_nodes_and_sees_them_change() -> None:
    """Gangs of different topology requests share the allocatable nodes and the topology-free proof; a node's
    allocatable growing, or a DaemonSet pod taking room for good, is seen by the next proof."""
    state = ClusterState()
    for name, zone in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        state.upsert_node(labelled(name, "8", zone, None))
    feasibility = Feasibility(state)
    everywhere = frozenset(state.nodes)

    def gang(cpu: int, count: int) -> list[Member]:
        return [Member(f"m{i}", {"cpu": Decimal(cpu), "pods": Decimal(1)}, everywhere) for i in range(count)]

    required = (Topology(ZONE, required=True),)
    assert feasibility.never_fits(("ml", "g1", "root"), gang(6, 3)) is None  # one member per node
    assert "zone" in (feasibility.never_fits(("ml", "g2", "root"), gang(6, 3), required) or "")  # no zone has 3 nodes
    assert feasibility.never_fits(("ml", "g3", "root"), gang(6, 2), required) is None
    assert feasibility.never_fits(("ml", "g4", "root"), gang(12, 1), required) is not None  # no node has 12 cpus
    bigger = labelled("b1", "16", "b", None)
    state.upsert_node(bigger)
    assert feasibility.never_fits(("ml", "g5", "root"), gang(12, 1), required) is None
    state.upsert_pod(pod("ds", "6", node_name="b1", phase="Running", gang=False, owner_kind="DaemonSet"))
    # A new shape (a shape proven to fit stays so until node shapes change): 10 cpus are all b1 has for good.
    assert feasibility.never_fits(("ml", "g6", "root"), gang(11, 1), required) is not None
