"""Topology-aware gangs: the planner's domain choice over small labelled clusters, cross-checked against a plain
exhaustive search, and the engine pass by pass (waiting for a rack, staged executors, starvation, replacements).

The exhaustive search here enumerates every assignment of members to nodes and knows nothing of the planner; the
tightest domain is recomputed from plain Decimal sums, as the module docstring of ``controller/topology.py`` defines
it (what the domain would have left in the gang's dominant resource, then the name).
"""

from __future__ import annotations

import datetime
import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.engine import Engine, GangDecision, Verdict
from controller.members import parse_expected
from controller.planner import check_placement
from controller.problem import Member, NodeFree, member_requests
from controller.state import ClusterState
from controller.topology import (
    Topology,
    anchored,
    never_fits_in_domains,
    never_fits_request,
    plan_in_domains,
    plan_in_table,
    plan_request,
    request_of,
    table_of,
    topology_of,
)
from gang import keys
from gang.config import Config
from gang.validate import check_root
from kubenexus.explain import explain
from kubenexus.simulate import _text, report, simulate_podgroups
from tests.support.contract import EXPECTED, GROUP, MIN, OWNER_UID
from tests.support.state_objects import node, pod, root, watch_roots

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


def labeller(zones: Mapping[str, str | None]) -> Callable[[str], dict[str, str]]:
    """One label key's domains, whatever the key (these clusters have one)."""
    found = labels(zones)
    return lambda key: found


def valid_assignments(gang: Sequence[Member], nodes: Sequence[NodeFree]) -> list[dict[str, str]]:
    """Every assignment of members to nodes within free capacity (plain backtracking, no pruning beyond capacity;
    these members have no host ports or pins)."""
    free = {n.name: dict(n.free) for n in nodes}
    found: list[dict[str, str]] = []
    current: dict[str, str] = {}

    def place(i: int) -> None:
        if i == len(gang):
            found.append(dict(current))
            return
        requests = member_requests(gang[i])
        for name in sorted(gang[i].nodes & free.keys()):
            if all(free[name].get(r, Decimal(0)) >= v for r, v in requests.items()):
                for r, v in requests.items():
                    free[name][r] = free[name].get(r, Decimal(0)) - v
                current[gang[i].name] = name
                place(i + 1)
                for r, v in requests.items():
                    free[name][r] += v
        current.pop(gang[i].name, None)

    place(0)
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
    ({f"{keys.TOPOLOGY_REQUIRED}.worker": RACK, f"{keys.TOPOLOGY_REQUIRED}.master": ZONE}, ""),
    ({f"{keys.TOPOLOGY_REQUIRED}.worker": "bad key"}, "is not a node label key"),
    ({f"{keys.TOPOLOGY_REQUIRED}.": RACK}, "is not a role name"),
    ({f"{keys.TOPOLOGY_REQUIRED}.worker": RACK, keys.TOPOLOGY_REQUIRED: ZONE}, "set one or the other"),
    ({f"{keys.TOPOLOGY_PREFERRED}.worker": RACK}, "unknown KubeNexus annotation"),
    ({f"{keys.TOPOLOGY_REQUIRED}.workrs": RACK}, f"has no role 'workrs' (the values of the training.kubeflow.org/"
                                                 f"replica-type label its pods get); did you mean "
                                                 f"{keys.TOPOLOGY_REQUIRED}.worker?"),
    ({f"{keys.TOPOLOGY_REQUIRED}.ps": RACK}, "its roles: master, worker"),
])
def test_the_annotations_are_validated_at_apply_time(notes: dict[str, str], denied: str) -> None:
    root = {"metadata": {"name": "train", "annotations": notes},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 4}}}}
    message = check_root(root, None, "kubeflow.org/v1", "PyTorchJob")
    assert (message is None) if not denied else (message is not None and denied in message), message


@pytest.mark.parametrize("api_version, kind, spec, role, denied", [
    ("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": [{"name": "workers"}, {"name": "ps"}]}, "worker",
     "did you mean kubenexus.io/topology-required.workers?"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": [{"name": "workers"}]}, "workers", ""),
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication", {}, "exector", "did you mean "
                                                                         "kubenexus.io/topology-required.executor?"),
    ("kubeflow.org/v2beta1", "MPIJob", {}, "launcher", ""),
])
def test_a_per_role_request_names_a_role_of_its_root(api_version: str, kind: str, spec: dict[str, Any], role: str,
                                                     denied: str) -> None:
    root = {"metadata": {"name": "j", "annotations": {f"{keys.TOPOLOGY_REQUIRED}.{role}": RACK}}, "spec": spec}
    message = check_root(root, None, api_version, kind)
    assert (message is None) if not denied else (message is not None and denied in message), message


def test_per_role_requests_need_a_kind_with_roles() -> None:
    job = {"metadata": {"name": "j", "annotations": {f"{keys.TOPOLOGY_REQUIRED}.worker": RACK}},
           "spec": {"parallelism": 2, "completions": 2}}
    message = check_root(job, None, "batch/v1", "Job")
    assert message is not None and "have no roles" in message


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


def test_totals_kept_by_the_caller_give_the_plans_of_totals_summed_here() -> None:
    """The engine hands in every domain's totals as its state keeps them (for all domains, also those the gang's
    members cannot use): the same domain and plan as totals summed over the candidate domains alone."""
    rng = random.Random(23)
    compared = 0
    for _ in range(400):
        gang, nodes, zones = _random_case(rng)
        table = table_of(nodes, labels(zones))
        kept = {domain: {r: sum((Decimal(n.free.get(r, 0)) for n in nodes if n.name in names), Decimal(0))
                         for r in ("cpu", "pods")} for domain, names in table.names.items()}
        everything = {r: sum((t[r] for t in kept.values()), Decimal(0)) for r in ("cpu", "pods")}
        for topology in (REQUIRED, PREFERRED):
            summed = plan_in_table(gang, table, topology)
            given = plan_in_table(gang, replace(table, totals=kept, total=everything), topology)
            assert (given.domains, given.fallback, given.result.placement) == \
                   (summed.domains, summed.fallback, summed.result.placement), (gang, nodes, zones, topology)
            compared += summed.result.fits
    assert compared > 100
    # The dominant resource is judged over the domains the gang can use: zone-c (no node of the members) has pods to
    # spare, which would make cpu look dominant and choose zone-b (3 cpu left) instead of zone-a (2 pod slots).
    nodes = [free("a1", 4, pods=2), free("b1", 3, pods=4), free("c1", 0, pods=100)]
    zones = {"a1": "zone-a", "b1": "zone-b", "c1": "zone-c"}
    table = table_of(nodes, labels(zones))
    kept = {d: {"cpu": sum((n.free["cpu"] for n in nodes if n.name in names), Decimal(0)),
                "pods": sum((n.free["pods"] for n in nodes if n.name in names), Decimal(0))}
            for d, names in table.names.items()}
    gang = members([1], ["a1", "b1"])
    assert plan_in_table(gang, table, REQUIRED).domains == ("zone-a",)
    assert plan_in_table(gang, replace(table, totals=kept), REQUIRED).domains == ("zone-a",)


# --- per-role and exclusive requests: units -----------------------------------------------------------------------

EXCLUSIVE = (Topology(ZONE, True, exclusive=True),)
WORKERS = (Topology(ZONE, True, role="worker"),)


def test_request_of_the_root_annotations() -> None:
    assert request_of({keys.TOPOLOGY_REQUIRED: RACK, keys.JOBSET_EXCLUSIVE_TOPOLOGY: ZONE}) == (Topology(RACK, True),)
    assert request_of({keys.JOBSET_EXCLUSIVE_TOPOLOGY: ZONE, f"{keys.TOPOLOGY_REQUIRED}.worker": RACK}) == (
        Topology(ZONE, True, exclusive=True), Topology(RACK, True, role="worker"))
    assert request_of({"other": "x"}) == ()


def units_hold(placement: Mapping[str, str], zones: Mapping[str, str | None], units: Mapping[str, str],
               exclusive: bool) -> bool:
    """Each unit's members on one labelled domain; with ``exclusive``, no two units on one domain."""
    domains: dict[str, set[str | None]] = {}
    for name, unit in units.items():
        domains.setdefault(unit, set()).add(zones[placement[name]])
    if any(len(d) != 1 or None in d for d in domains.values()):
        return False
    chosen = [next(iter(d)) for d in domains.values()]
    return not exclusive or len(set(chosen)) == len(chosen)


def _units_case(rng: random.Random) -> tuple[list[Member], list[NodeFree], dict[str, str | None], dict[str, str]]:
    nodes = [NodeFree(f"n{i}", {"cpu": Decimal(rng.randint(0, 6)), "pods": Decimal(rng.randint(1, 3))})
             for i in range(rng.randint(1, 5))]
    zones: dict[str, str | None] = {n.name: rng.choice(["z-a", "z-b", "z-c", None]) for n in nodes}
    gang = members([rng.randint(1, 3) for _ in range(rng.randint(1, 5))], zones)
    children = {m.name: f"job-{rng.randint(0, 2)}" for m in gang}
    return gang, nodes, zones, children


def test_exclusive_child_jobs_agree_with_exhaustive_search() -> None:
    # Every member in a child Job, each child Job on a zone of its own: units alone, where the search is exact.
    rng = random.Random(1414)
    seen = {"fits": 0, "not yet": 0, "fits only sharing a zone": 0}
    for _ in range(500):
        gang, nodes, zones, children = _units_case(rng)
        roles = {name: ("worker", child) for name, child in children.items()}
        everything = valid_assignments(gang, nodes)
        exists = any(units_hold(p, zones, children, exclusive=True) for p in everything)
        found = plan_request(gang, nodes, labeller(zones), EXCLUSIVE, roles)
        assert found.result.fits == exists, (gang, nodes, zones, children, found)
        if exists:
            assert units_hold(found.result.placement or {}, zones, children, exclusive=True)
            assert not check_placement(gang, nodes, found.result.placement or {})
        else:
            assert found.result.shortfall
        seen["fits" if exists else "not yet"] += 1
        shared = any(units_hold(p, zones, children, False) for p in everything)
        seen["fits only sharing a zone"] += not exists and shared
        never = never_fits_request(gang, nodes, labeller(zones), EXCLUSIVE, roles)
        assert never is None or not exists, never
    assert min(seen.values()) > 0, seen


def test_per_role_plans_are_sound_and_agree_where_the_role_alone_decides() -> None:
    # Workers in one zone, the others anywhere: every plan is checked; with no other member the search is exact.
    rng = random.Random(1415)
    seen = {"fits": 0, "not yet": 0}
    for _ in range(500):
        gang, nodes, zones, _ = _units_case(rng)
        workers = {m.name for m in gang if rng.random() < 0.7} or {gang[0].name}
        roles = {m.name: ("worker" if m.name in workers else "master", "") for m in gang}
        everything = valid_assignments(gang, nodes)
        exists = any(units_hold(p, zones, dict.fromkeys(workers, "w"), False) for p in everything)
        found = plan_request(gang, nodes, labeller(zones), WORKERS, roles)
        if found.result.fits:
            assert units_hold(found.result.placement or {}, zones, dict.fromkeys(workers, "w"), False)
            assert not check_placement(gang, nodes, found.result.placement or {})
        assert found.result.fits <= exists
        if len(workers) == len(gang):
            assert found.result.fits == exists
        seen["fits" if found.result.fits else "not yet"] += 1
    assert min(seen.values()) > 0, seen


def test_members_of_a_started_gang_join_the_domain_of_their_unit() -> None:
    zones = {"a1": "zone-a", "a2": "zone-a", "b1": "zone-b"}
    gang = members([1, 1, 1], zones)
    roles = {"m0": ("worker", ""), "m1": ("worker", ""), "m2": ("master", ""), "w-old": ("worker", "")}
    kept = anchored(gang, WORKERS, roles, {"w-old": "a2"}, labeller(zones), zones)
    assert [m.nodes for m in kept] == [frozenset({"a1", "a2"})] * 2 + [frozenset(zones)]
    assert anchored(gang, (Topology(ZONE, True),), {}, {"m2": "b1"}, labeller(zones), zones)[0].nodes \
        == frozenset({"b1"})
    assert anchored(gang, (Topology(ZONE, False),), {}, {"m2": "b1"}, labeller(zones), zones) == gang


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
    meta["annotations"] = {OWNER_UID: f"root-{group}", keys.OWNER_ANNOTATION: f"kubeflow.org/v1/PyTorchJob/{group}"}
    meta["creationTimestamp"] = (T0 + datetime.timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")
    return obj


def cluster(racks: Mapping[str, Sequence[str]], roots: Mapping[str, Mapping[str, str]],
            config: Config | None = None) -> tuple[ClusterState, Engine]:
    state = ClusterState()
    for rack, names in racks.items():
        for name in names:
            state.upsert_node(rack_node(name, rack))
    # each gang's root, of every kind the members here name (a PyTorchJob, a JobSet, a SparkApplication)
    watch_roots(state, *(root(api_version, kind, group, f"root-{group}", dict(annotations))
                         for group, annotations in roots.items()
                         for api_version, kind in (("kubeflow.org/v1", "PyTorchJob"), ("jobset.x-k8s.io/v1alpha2",
                                                   "JobSet"), ("sparkoperator.k8s.io/v1beta2", "SparkApplication"))))
    return state, Engine(state, config or Config())


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


@pytest.mark.parametrize("room_beside", [False, True])
def test_members_bound_without_a_release_fix_the_rack_of_the_rest(room_beside: bool) -> None:
    # A 3 x 4 cpu gang requiring one rack; someone bound train-0 to a (r1) without the controller. r2 (b, c, 4 cpu
    # free each) could hold the other two and is the tighter rack, but that would split the gang over two racks:
    # they may only join train-0 in r1, where a has room for one more (and d, when ``room_beside``, for another).
    racks = {"r1": ["a", "d"] if room_beside else ["a"], "r2": ["b", "c"]}
    state, engine = cluster(racks, {"train": {keys.TOPOLOGY_REQUIRED: RACK}})
    for where in "bc":
        busy(state, f"etl-{where}", "4", where)
    state.upsert_pod(member("train-0", "4", "train", 3, node_name="a", phase="Running"), NOW)
    for i in (1, 2):
        state.upsert_pod(member(f"train-{i}", "4", "train", 3, gated=True), NOW)
    decided = passes(engine)["train"]
    if room_beside:
        assert decided.decision == Verdict.RELEASE and set(decided.plan.values()) == {"a", "d"}, decided.reason
    else:
        assert decided.decision == Verdict.WAIT and "have room for only 1" in decided.reason
        assert "bound without the controller's release (train-0 on a)" in decided.reason
        assert "keep the rest of their unit to their example.com/rack domain" in decided.reason


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
    cycle, ungated, podgroups, _ = simulate_podgroups(_snapshot(free_rack), Config(), NOW)
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


def kind_member(name: str, cpu: str, group: str, size: int, owner: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """A gated member of a root of ``owner`` (``<group>/<version>/<kind>/<name>``) with its operator's labels."""
    obj = member(name, cpu, group, size, gated=True)
    obj["metadata"]["labels"].update(labels)
    obj["metadata"]["annotations"][keys.OWNER_ANNOTATION] = owner
    return obj


def test_only_the_workers_of_a_pytorchjob_share_a_rack() -> None:
    # r1: a (8 cpu), r2: b (8 cpu). Master (4 cpu) + 2 workers (4 cpu): workers need one rack (8 cpu holds both),
    # so the master goes to the other rack; a whole-gang request (12 cpu) would wait.
    state, engine = cluster({"r1": ["a"], "r2": ["b"]}, {"train": {f"{keys.TOPOLOGY_REQUIRED}.worker": RACK}})
    owner = "kubeflow.org/v1/PyTorchJob/train"
    state.upsert_pod(kind_member("train-master-0", "4", "train", 3, owner,
                                 {"training.kubeflow.org/replica-type": "master"}), NOW)
    for i in range(2):
        state.upsert_pod(kind_member(f"train-worker-{i}", "4", "train", 3, owner,
                                     {"training.kubeflow.org/replica-type": "worker"}), NOW)
    decided = passes(engine)["train"]
    assert decided.decision == Verdict.RELEASE and decided.topology == (Topology(RACK, True, role="worker"),)
    workers = {decided.plan["train-worker-0"], decided.plan["train-worker-1"]}
    assert len(workers) == 1 and decided.plan["train-master-0"] not in workers


def test_jobset_child_jobs_take_racks_of_their_own() -> None:
    # Three racks of one 8-cpu node; two child Jobs of 2 x 2 cpu: each fits any rack, and they must not share one;
    # the tightest racks first, by name: r1 and r2 (r3 has room for both, but exclusive).
    state, engine = cluster({"r1": ["a"], "r2": ["b"], "r3": ["c"]}, {"js": {keys.JOBSET_EXCLUSIVE_TOPOLOGY: RACK}})
    owner = "jobset.x-k8s.io/v1alpha2/JobSet/js"
    for job in range(2):
        for i in range(2):
            state.upsert_pod(kind_member(f"js-w-{job}-{i}", "2", "js", 4, owner, {
                "jobset.sigs.k8s.io/replicatedjob-name": "w", "jobset.sigs.k8s.io/job-index": str(job)}), NOW)
    decided = passes(engine)["js"]
    assert decided.decision == Verdict.RELEASE and decided.domains == ("r1", "r2")
    racks = [{decided.plan[f"js-w-{job}-{i}"] for i in range(2)} for job in range(2)]
    assert all(len(r) == 1 for r in racks) and racks[0] != racks[1]


def test_later_child_jobs_of_a_jobset_are_reserved_and_released_in_racks_of_their_own() -> None:
    # InOrder: child Job d-0 (one 2-cpu pod) first; replicated job w's two child Jobs (2 x 4 cpu each) come later,
    # announced with 2 members per child Job. Four racks of one 8-cpu node. Each later child Job needs a whole rack
    # of its own: two 4-cpu slots of one child Job beside the driver (6 cpu free there) would share its rack.
    # When the later pods come (w-1's first), each takes the slots of its own child Job.
    state, engine = cluster({f"r{i}": [f"n{i}"] for i in range(1, 5)}, {"js": {keys.JOBSET_EXCLUSIVE_TOPOLOGY: RACK}})
    owner = "jobset.x-k8s.io/v1alpha2/JobSet/js"
    labels = {"jobset.sigs.k8s.io/replicatedjob-name": "d", "jobset.sigs.k8s.io/job-index": "0"}
    driver = kind_member("js-d-0-0", "2", "js", 5, owner, labels)
    driver["metadata"]["annotations"][EXPECTED] = json.dumps(
        [{"role": "w", "count": 4, "requests": {"cpu": "4"}, "perChild": 2}])
    state.upsert_pod(driver, NOW)
    decided = passes(engine)["js"]
    assert decided.decision == Verdict.RELEASE, decided.reason
    rack = {f"n{i}": f"r{i}" for i in range(1, 5)}
    slots = [{rack[decided.plan[f"w (expected #{1 + 2 * job + i})"]] for i in range(2)} for job in range(2)]
    assert all(len(s) == 1 for s in slots), slots
    assert len({rack[decided.plan["js-d-0-0"]], *slots[0], *slots[1]}) == 3 and len(decided.domains) == 3
    for job in (1, 0):
        for i in range(2):
            late = kind_member(f"js-w-{job}-{i}", "4", "js", 5, owner, {
                "jobset.sigs.k8s.io/replicatedjob-name": "w", "jobset.sigs.k8s.io/job-index": str(job)})
            late["metadata"]["creationTimestamp"] = f"2026-11-22T10:01:{10 * (2 - job) + i:02d}Z"  # w-1's first
            state.upsert_pod(late, NOW)
    later = (T0 + datetime.timedelta(minutes=2)).timestamp()
    released = passes(engine, later)["js"]
    where = {name: node for name, node in state.pending.items()}
    for job in range(2):
        nodes = {where[f"uid-js-w-{job}-{i}"] for i in range(2)}
        assert {rack[n] for n in nodes} == slots[job], (job, nodes, released.reason)


def test_the_announcement_names_later_child_jobs_and_a_malformed_one_reserves_nothing() -> None:
    entry = {"role": "w", "count": 4, "requests": {"cpu": "1"}}

    def children(per_child: Any) -> list[str]:
        return [e.child for e in parse_expected(json.dumps([{**entry, "perChild": per_child}]), "g")]

    assert children(2) == ["w-0", "w-0", "w-1", "w-1"]
    assert children(0) == children(-2) == [""] * 4
    for garbage in ("two", [2], {"n": 2}):  # a hand edit: the gang waits for its members instead of reserving room
        assert parse_expected(json.dumps([{**entry, "perChild": garbage}]), "g") == ()


def test_more_child_jobs_than_racks_never_fits() -> None:
    state, engine = cluster({"r1": ["a"], "r2": ["b"]}, {"js": {keys.JOBSET_EXCLUSIVE_TOPOLOGY: RACK}})
    owner = "jobset.x-k8s.io/v1alpha2/JobSet/js"
    for job in range(3):
        state.upsert_pod(kind_member(f"js-w-{job}-0", "1", "js", 3, owner, {
            "jobset.sigs.k8s.io/replicatedjob-name": "w", "jobset.sigs.k8s.io/job-index": str(job)}), NOW)
    decided = passes(engine)["js"]
    assert decided.decision == Verdict.NEVER_FITS and "3 child Jobs each need" in decided.reason


SPARK = "sparkoperator.k8s.io/v1beta2/SparkApplication/spark"


def spark_driver(cpu: str) -> dict[str, Any]:
    """The gated driver of SparkApplication spark, announcing 2 executors of 4 cpu (a gang of 3)."""
    driver = kind_member("spark-driver", cpu, "spark", 3, SPARK, {"spark-role": "driver"})
    driver["metadata"]["annotations"][EXPECTED] = json.dumps(
        [{"role": "executor", "count": 2, "requests": {"cpu": "4"}}])
    return driver


def test_spark_executors_expected_later_share_a_rack_the_driver_need_not() -> None:
    # Free: a 8 - 6 = 2 (r1), b 8 - 7 = 1 and c 8 (r2). The 2 expected executors (4 cpu each) must share a rack:
    # only c holds both (r1 has 2 cpu, b 1). The driver (2 cpu, free to go anywhere) then fits only on a.
    state, engine = cluster({"r1": ["a"], "r2": ["b", "c"]}, {"spark": {f"{keys.TOPOLOGY_REQUIRED}.executor": RACK}})
    busy(state, "etl-a", "6", "a")
    busy(state, "etl-b", "7", "b")
    state.upsert_pod(spark_driver("2"), NOW)
    decided = passes(engine)["spark"]
    assert decided.decision == Verdict.RELEASE, decided.reason
    assert decided.plan["spark-driver"] == "a"
    assert {node for name, node in decided.plan.items() if name.startswith("executor")} == {"c"}


def test_reserved_executor_slots_that_must_move_move_together_into_one_rack() -> None:
    # r1 (a, b) and r2 (c, d) of 8-cpu nodes; a and b run 4-cpu pods, so r1 is the tightest rack for the two 4-cpu
    # executor slots (one on a, one on b). Another scheduler then fills b; when the executors come, the slots move
    # first, and being the whole executor unit they move together into r2, not one to a (the room left in r1) and
    # one into r2; the executors take them.
    state, engine = cluster({"r1": ["a", "b"], "r2": ["c", "d"]},
                            {"spark": {f"{keys.TOPOLOGY_REQUIRED}.executor": RACK}})
    busy(state, "etl-a", "4", "a")
    busy(state, "etl-b", "4", "b")
    state.upsert_pod(spark_driver("1"), NOW)
    decided = passes(engine)["spark"]
    assert decided.decision == Verdict.RELEASE, decided.reason
    assert {node for name, node in decided.plan.items() if name.startswith("executor")} == {"a", "b"}
    busy(state, "other-b", "4", "b")
    for i in range(2):
        state.upsert_pod(kind_member(f"spark-exec-{i}", "4", "spark", 3, SPARK, {"spark-role": "executor"}), NOW)
    passes(engine, (T0 + datetime.timedelta(minutes=2)).timestamp())
    slots = engine.books.slots[decided.key]
    assert len(slots) == 2 and set(slots) <= {"c", "d"}, slots
    assert {state.pending[f"uid-spark-exec-{i}"] for i in range(2)} <= {"c", "d"}


def test_explain_shows_the_topology_request() -> None:
    examples = Path(__file__).resolve().parent.parent / "workloads" / "training" / "examples"
    pod = yaml.safe_load((examples / "pytorch-worker.yaml").read_text())
    objects = [o for o in yaml.safe_load_all((examples / "pytorch-objects.yaml").read_text()) if o]
    root = next(o for o in objects if o["kind"] == "PyTorchJob")
    root["metadata"].setdefault("annotations", {})[f"{keys.TOPOLOGY_REQUIRED}.worker"] = RACK
    reasons = explain(pod, objects, None)["reasons"]
    assert f"topology ({keys.TOPOLOGY_REQUIRED}.worker): the worker members in one domain of node label {RACK}" \
        in reasons, reasons
