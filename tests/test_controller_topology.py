"""Topology-aware gangs: the planner's domain choice over small labelled clusters, cross-checked against a plain
exhaustive search, and the engine pass by pass (waiting for a rack, staged executors, starvation, replacements).

The exhaustive search here enumerates every assignment of members to nodes and knows nothing of the planner; the
tightest domain is recomputed from plain Decimal sums, as the module docstring of ``controller/topology.py`` defines
it (what the domain would have left in the gang's dominant resource, then the name).
"""

from __future__ import annotations

import datetime
import itertools
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import pytest

from controller.engine import Engine, GangDecision, Verdict
from controller.planner import check_placement
from controller.problem import Member, NodeFree, member_requests
from controller.state import ClusterState
from controller.topology import Topology, never_fits_in_domains, plan_in_domains, topology_of
from gang import keys
from gang.config import Config
from gang.validate import check_root
from kubenexus.simulate import _text, report, simulate_podgroups
from tests.support.contract import EXPECTED, GROUP, MIN, OWNER_UID
from tests.support.state_objects import node, pod

pytestmark = pytest.mark.unit

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
REQUIRED = Topology(ZONE, required=True)
PREFERRED = Topology(ZONE, required=False)


def free(name: str, cpu: int, pods: int = 110) -> NodeFree:
    return NodeFree(name, {"cpu": Decimal(cpu), "pods": Decimal(pods)})


def members(cpus: Iterable[int], nodes: Iterable[str]) -> list[Member]:
    allowed = frozenset(nodes)
    return [Member(f"m{i}", {"cpu": Decimal(cpu)}, allowed) for i, cpu in enumerate(cpus)]


def labels(zones: Mapping[str, str | None]) -> dict[str, str]:
    return {node: zone for node, zone in zones.items() if zone is not None}


def valid_assignments(gang: Sequence[Member], nodes: Sequence[NodeFree]) -> list[dict[str, str]]:
    """Every assignment of members to nodes that passes the independent checker."""
    names = [n.name for n in nodes]
    found = []
    for choice in itertools.product(names, repeat=len(gang)):
        placement = {m.name: where for m, where in zip(gang, choice, strict=True)}
        if not check_placement(gang, nodes, placement):
            found.append(placement)
    return found


def in_one(placement: Mapping[str, str], zones: Mapping[str, str | None]) -> str | None:
    values = {zones[node] for node in placement.values()}
    return next(iter(values)) if len(values) == 1 and None not in values else None


def tightest(gang: Sequence[Member], nodes: Sequence[NodeFree], zones: Mapping[str, str | None],
             fitting: set[str]) -> str:
    """The tightest of ``fitting``: least left in the dominant resource over candidate domains (every member has a
    node in it), then by name."""
    demand: dict[str, Decimal] = {}
    for m in gang:
        for r, v in member_requests(m).items():
            demand[r] = demand.get(r, Decimal(0)) + v
    domains: dict[str, list[NodeFree]] = {}
    for n in nodes:
        if zones[n.name] is not None:
            domains.setdefault(str(zones[n.name]), []).append(n)
    candidates = {d: ns for d, ns in domains.items() if all(m.nodes & {n.name for n in ns} for m in gang)}

    def total(ns: Iterable[NodeFree], r: str) -> Decimal:
        return sum((Decimal(n.free.get(r, 0)) for n in ns), Decimal(0))

    dominant = max(demand, key=lambda r: (demand[r] / (total([n for ns in candidates.values() for n in ns], r)
                                                       or Decimal("1e-30")), r))
    return min(fitting, key=lambda d: (total(candidates[d], dominant) - demand[dominant], d))


# --- tables --------------------------------------------------------------------------------------------------------


def test_fits_only_across_domains_waits_and_names_the_best_domains_shortfall() -> None:
    # zone-a: 4 + 4 cpu, zone-b: 6 + 6 cpu; 8 members of 2 cpu = 16 cpu. The cluster has 20 free, but zone-b holds
    # 3 + 3 = 6 of them and zone-a 2 + 2 = 4: no zone holds all 8.
    nodes = [free("a1", 4), free("a2", 4), free("b1", 6), free("b2", 6)]
    zones = {"a1": "zone-a", "a2": "zone-a", "b1": "zone-b", "b2": "zone-b"}
    gang = members([2] * 8, zones)
    found = plan_in_domains(gang, nodes, labels(zones), REQUIRED)
    assert not found.result.fits and found.domains == ("zone-b",)
    assert "zone-b has room for 6 of 8 members" in found.result.shortfall
    preferred = plan_in_domains(gang, nodes, labels(zones), PREFERRED)
    assert preferred.result.fits and preferred.domains == ("zone-a", "zone-b")


def test_the_tightest_domain_that_fits_is_chosen_and_ties_go_by_name() -> None:
    # 3 members of 2 cpu (6 cpu). zone-c (16 cpu) and zone-b (8) and zone-a (8) hold them; zone-d (4) does not.
    # zone-a and zone-b leave 2 each: by name, zone-a. zone-c stays free for a bigger gang.
    nodes = [free("a1", 8), free("b1", 4), free("b2", 4), free("c1", 8), free("c2", 8), free("d1", 4)]
    zones = {"a1": "zone-a", "b1": "zone-b", "b2": "zone-b", "c1": "zone-c", "c2": "zone-c", "d1": "zone-d"}
    found = plan_in_domains(members([2, 2, 2], zones), nodes, labels(zones), REQUIRED)
    assert found.domains == ("zone-a",) and set(found.result.placement.values()) == {"a1"}  # type: ignore[union-attr]


def test_aggregate_room_is_not_enough_inside_a_domain() -> None:
    # zone-a has 6 cpu in sum (3 + 3) but no node for a 4-cpu member; zone-b (5) holds 4 + 1.
    nodes = [free("a1", 3), free("a2", 3), free("b1", 5)]
    zones = {"a1": "zone-a", "a2": "zone-a", "b1": "zone-b"}
    found = plan_in_domains(members([4, 1], zones), nodes, labels(zones), REQUIRED)
    assert found.domains == ("zone-b",) and found.result.fits


def test_nodes_without_the_label_are_in_no_required_domain() -> None:
    nodes = [free("bare", 64), free("a1", 2)]
    zones = {"bare": None, "a1": "zone-a"}
    gang = members([2, 2], zones)
    assert not plan_in_domains(gang, nodes, labels(zones), REQUIRED).result.fits
    assert plan_in_domains(gang, nodes, labels(zones), PREFERRED).fallback  # the caller plans it anywhere
    never = never_fits_in_domains(gang, nodes, labels(zones), REQUIRED)
    assert never is not None and "the largest of 1, zone-a, has 1 node(s) with 2 cpu" in never


def test_never_fits_names_the_largest_domain() -> None:
    nodes = [free("a1", 4), free("b1", 6), free("b2", 6)]
    zones = {"a1": "zone-a", "b1": "zone-b", "b2": "zone-b"}
    never = never_fits_in_domains(members([4] * 4, zones), nodes, labels(zones), REQUIRED)
    assert never is not None and "zone-b, has 2 node(s) with 12 cpu" in never
    assert never_fits_in_domains(members([4] * 2, zones), nodes, labels(zones), REQUIRED) is None
    assert never_fits_in_domains(members([4] * 4, zones), nodes, labels(zones), PREFERRED) is None


def test_topology_of_the_root_annotations() -> None:
    assert topology_of({keys.TOPOLOGY_REQUIRED: RACK}) == Topology(RACK, True)
    assert topology_of({keys.TOPOLOGY_PREFERRED: ZONE}) == Topology(ZONE, False)
    assert topology_of({keys.TOPOLOGY_PREFERRED: ZONE, keys.TOPOLOGY_REQUIRED: RACK}) == Topology(RACK, True)
    assert topology_of({keys.TOPOLOGY_REQUIRED: ""}) is None and topology_of({}) is None


@pytest.mark.parametrize("notes, denied", [
    ({keys.TOPOLOGY_REQUIRED: ZONE}, ""),
    ({keys.TOPOLOGY_PREFERRED: "rack"}, ""),
    ({keys.TOPOLOGY_REQUIRED: "bad key"}, "is not a node label key"),
    ({keys.TOPOLOGY_REQUIRED: ""}, "is not a node label key"),
    ({keys.TOPOLOGY_PREFERRED: "-x.example.com/rack"}, "is not a node label key"),
    ({keys.TOPOLOGY_PREFERRED: "x" * 64}, "is not a node label key"),
    ({keys.TOPOLOGY_REQUIRED: ZONE, keys.TOPOLOGY_PREFERRED: RACK}, "not both"),
])
def test_the_annotations_are_validated_at_apply_time(notes: dict[str, str], denied: str) -> None:
    root = {"metadata": {"name": "train", "annotations": notes},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}}
    message = check_root(root, None, "kubeflow.org/v1", "PyTorchJob")
    assert (message is None) if not denied else (message is not None and denied in message), message


# --- cross-check against exhaustive search ------------------------------------------------------------------------


def _random_case(rng: random.Random) -> tuple[list[Member], list[NodeFree], dict[str, str | None]]:
    count = rng.randint(1, 5)
    nodes = [NodeFree(f"n{i}", {"cpu": Decimal(rng.randint(0, 8)), "pods": Decimal(rng.randint(1, 4))})
             for i in range(count)]
    zones: dict[str, str | None] = {n.name: rng.choice(["z-a", "z-b", "z-c", None]) for n in nodes}
    names = list(zones)
    shapes = [({"cpu": Decimal(rng.randint(1, 4))}, frozenset(rng.sample(names, rng.randint(1, len(names)))))
              for _ in range(rng.randint(1, 2))]
    gang = [Member(f"m{i}", *rng.choice(shapes)) for i in range(rng.randint(1, 4))]
    return gang, nodes, zones


def test_agrees_with_exhaustive_search() -> None:
    rng = random.Random(14)
    seen = {"one domain": 0, "only across domains": 0, "nowhere": 0, "tightest not first by name": 0}
    for _ in range(600):
        gang, nodes, zones = _random_case(rng)
        everything = valid_assignments(gang, nodes)
        within = {d for p in everything if (d := in_one(p, zones)) is not None}
        required = plan_in_domains(gang, nodes, labels(zones), REQUIRED)
        assert required.result.fits == bool(within), (gang, nodes, zones, required)
        if within:
            placement = required.result.placement
            assert placement is not None and not check_placement(gang, nodes, placement)
            assert required.domains == (tightest(gang, nodes, zones, within),)
            assert {zones[n] for n in placement.values()} == {required.domains[0]}
            seen["tightest not first by name"] += required.domains[0] != min(within)
        else:
            assert required.result.shortfall
        preferred = plan_in_domains(gang, nodes, labels(zones), PREFERRED)
        if within:
            assert preferred.domains == required.domains and preferred.result.placement == required.result.placement
        elif preferred.result.fits:
            assert len(preferred.domains) >= 2 and not check_placement(gang, nodes, preferred.result.placement or {})
        else:
            assert preferred.fallback  # the engine plans it anywhere then
        # These nodes are "empty": a never-fits claim must mean no assignment within one domain.
        assert never_fits_in_domains(gang, nodes, labels(zones), REQUIRED) is None or not within
        seen["one domain" if within else "only across domains" if everything else "nowhere"] += 1
    assert min(seen.values()) > 0, seen


# --- the engine, pass by pass ---------------------------------------------------------------------------------------

T0 = datetime.datetime(2026, 11, 22, 10, 0, tzinfo=datetime.UTC)
NOW = (T0 + datetime.timedelta(minutes=1)).timestamp()


def rack_node(name: str, rack: str, cpu: str = "8") -> dict[str, Any]:
    obj = node(name, cpu=cpu, pods="110")
    obj["metadata"]["labels"][RACK] = rack
    return obj


def member(name: str, cpu: str, group: str, size: int, minute: int = 0, **kw: Any) -> dict[str, Any]:
    obj = pod(name, cpu, **kw)
    meta = obj["metadata"]
    meta["labels"] = {GROUP: group, MIN: str(size)}
    meta["annotations"] = {OWNER_UID: f"root-{group}"}
    meta["creationTimestamp"] = (T0 + datetime.timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")
    return obj


def cluster(racks: Mapping[str, Sequence[str]], roots: Mapping[str, Mapping[str, str]],
            config: Config | None = None) -> tuple[ClusterState, Engine]:
    state = ClusterState()
    for rack, names in racks.items():
        for name in names:
            state.upsert_node(rack_node(name, rack))
    engine = Engine(state, config or Config(), lambda p: roots.get(p.gang[1] if p.gang else "", {}))
    return state, engine


def passes(engine: Engine, now: float = NOW) -> dict[str, GangDecision]:
    return {d.name: d for d in engine.cycle(now).gangs}


def busy(state: ClusterState, name: str, cpu: str, where: str) -> None:
    state.upsert_pod(pod(name, cpu, node_name=where, phase="Running", gang=False), NOW)


def test_a_gang_waits_for_a_rack_although_the_cluster_has_room_then_starts_inside_one() -> None:
    # Two racks of two 8-cpu nodes, each node running a 5-cpu pod: 3 free per node, 12 in all. The gang (4 x 3 cpu)
    # fits the cluster but no rack (6 free each). When both pods of rack r2 finish, it holds 16 cpu.
    state, engine = cluster({"r1": ["a", "b"], "r2": ["c", "d"]}, {"train": {keys.TOPOLOGY_REQUIRED: RACK}})
    for where in "abcd":
        busy(state, f"etl-{where}", "5", where)
    for i in range(4):
        state.upsert_pod(member(f"train-{i}", "3", "train", 4, gated=True), NOW)
    first = passes(engine)["train"]
    assert first.decision == Verdict.WAIT and first.topology == (Topology(RACK, True),)
    assert "no example.com/rack domain has room for the whole gang now" in first.reason
    assert "has room for 2 of 4 members" in first.reason
    state.delete_pod("uid-etl-c")
    state.delete_pod("uid-etl-d")
    second = passes(engine)["train"]
    assert second.decision == Verdict.RELEASE and second.domains == ("r2",)
    assert set(second.plan.values()) <= {"c", "d"} and "in example.com/rack domain r2" in second.reason


def test_a_required_gang_no_rack_could_ever_hold_never_fits() -> None:
    state, engine = cluster({"r1": ["a"], "r2": ["b", "c"]}, {"big": {keys.TOPOLOGY_REQUIRED: RACK}})
    for i in range(5):
        state.upsert_pod(member(f"big-{i}", "4", "big", 5, gated=True), NOW)
    decided = passes(engine)["big"]
    assert decided.decision == Verdict.NEVER_FITS
    assert "the largest of 2, r2, has 2 node(s) with 16 cpu" in decided.reason


def test_a_preferred_gang_falls_back_to_any_placement() -> None:
    state, engine = cluster({"r1": ["a"], "r2": ["b"]}, {"wide": {keys.TOPOLOGY_PREFERRED: RACK}})
    for i in range(4):
        state.upsert_pod(member(f"wide-{i}", "4", "wide", 4, gated=True), NOW)
    decided = passes(engine)["wide"]
    assert decided.decision == Verdict.RELEASE and decided.domains == ("r1", "r2")
    assert "across 2 example.com/rack domains" in decided.reason


def test_staged_executors_are_reserved_in_the_drivers_rack() -> None:
    # A Spark driver (1 cpu) and 3 expected executors of 4 cpu: 13 cpu. r1 (one 8-cpu node) cannot hold them;
    # r2 (two 8-cpu nodes) can, so the driver and every reserved slot are in r2; the executors go there later.
    state, engine = cluster({"r1": ["a"], "r2": ["b", "c"]}, {"spark": {keys.TOPOLOGY_REQUIRED: RACK}})
    driver = member("spark-driver", "1", "spark", 4, gated=True)
    driver["metadata"]["annotations"][EXPECTED] = json.dumps(
        [{"role": "executor", "count": 3, "requests": {"cpu": "4"}}])
    state.upsert_pod(driver, NOW)
    decided = passes(engine)["spark"]
    assert decided.decision == Verdict.RELEASE and decided.domains == ("r2",)
    assert set(decided.plan.values()) <= {"b", "c"} and len(decided.plan) == 4


def test_a_starving_gangs_shadow_plan_lies_in_one_rack() -> None:
    # r1: two nodes, r2: one node; every node runs an 8-cpu pod that will finish. The gang (2 x 8 cpu) starves:
    # its shadow plan must take both nodes of r1, never one node of each rack.
    state, engine = cluster({"r1": ["a", "b"], "r2": ["c"]}, {"llm": {keys.TOPOLOGY_REQUIRED: RACK}})
    for where in "abc":
        busy(state, f"etl-{where}", "8", where)
    for i in range(2):
        state.upsert_pod(member(f"llm-{i}", "8", "llm", 2, gated=True), NOW)
    later = (T0 + datetime.timedelta(minutes=10)).timestamp()
    decided = passes(engine, later)["llm"]
    assert decided.decision == Verdict.WAIT and set(decided.shadow.values()) == {"a", "b"}


# --- what users see: simulate's result, its text, the PodGroup status ---------------------------------------------


def _snapshot(free_rack: bool) -> list[dict[str, Any]]:
    """A PyTorchJob of 4 x 3 cpu requiring one rack; racks r1 (a, b) and r2 (c, d) of 8-cpu nodes, each running a
    5-cpu pod unless ``free_rack`` (then r2's nodes are empty)."""
    objects: list[dict[str, Any]] = []
    for name, rack in (("a", "r1"), ("b", "r1"), ("c", "r2"), ("d", "r2")):
        objects.append({"apiVersion": "v1", "kind": "Node", **rack_node(name, rack)})
        if not (free_rack and rack == "r2"):
            objects.append({"apiVersion": "v1", "kind": "Pod",
                            **pod(f"etl-{name}", "5", node_name=name, phase="Running", gang=False)})
    for i in range(4):
        obj = member(f"train-{i}", "3", "train", 4, gated=True)
        obj["metadata"]["annotations"][keys.OWNER_ANNOTATION] = "kubeflow.org/v1/PyTorchJob/train"
        objects.append({"apiVersion": "v1", "kind": "Pod", **obj})
    objects.append({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                    "metadata": {"name": "train", "namespace": "ml", "uid": "root-train",
                                 "annotations": {keys.TOPOLOGY_REQUIRED: RACK}},
                    "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}})
    return objects


@pytest.mark.parametrize("free_rack", [False, True])
def test_simulate_and_the_podgroup_show_the_topology_and_the_domain(free_rack: bool) -> None:
    cycle, ungated, podgroups = simulate_podgroups(_snapshot(free_rack), Config(), NOW)
    result = report(cycle, ungated, podgroups)
    [gang] = result["gangs"]
    [group] = result["podgroups"]
    assert gang["topology"] == [{"key": RACK, "mode": "Required"}]
    assert group["status"]["topology"]["requests"] == [{"key": RACK, "mode": "Required"}]
    if free_rack:
        assert gang["decision"] == "release" and gang["domains"] == ["r2"]
        assert group["status"]["topology"]["domains"] == ["r2"]
        assert "train: release [r2] — " in _text(result)
    else:
        assert gang["decision"] == "wait" and "has room for 2 of 4 members" in gang["reason"]
        assert "domains" not in group["status"]["topology"]
