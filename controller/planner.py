"""Placement planner: a gang fits only when every member has a concrete node — a witness plan, never a sum.

Sums of free capacity say yes while no single node can hold a member (scheduler-plugins coscheduling, Volcano's
enqueue, Kueue's quota). This module answers with an assignment of every member to a node that respects each node's
free capacity in every resource (the pod slot included) and host ports, or with a safe "not yet" and the numbers
that fall short (worded by ``controller/explain.py``). It is pure and deterministic: eligibility sets and free
vectors are computed elsewhere, and the same inputs give the same plan whatever order they come in.

How: identical members form classes placed as counts, never as permutations (``controller/problem.py``). First-fit
and best-fit decreasing answer almost every gang at once; when both fail, a bounded depth-first search with symmetry
breaking and pruning finds a plan, proves there is none, or runs out of budget (also "not yet"). Quantities are
scaled to exact integers per resource, so arithmetic stays exact and fast.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from controller.explain import amount_text, fragmented_reason, no_plan_reason, port_name
from controller.predicates import normalize_port, ports_clash
from controller.problem import (
    Member,
    MemberClass,
    NodeFree,
    Packing,
    Port,
    Problem,
    RequestsMemo,
    build,
    class_room,
    member_ports,
    member_requests,
    port_clique,
)

DEFAULT_BUDGET = 200_000
NEVER_FITS_BUDGET = 20_000


@dataclass(frozen=True)
class PlanResult:
    """``placement`` maps every member to a node, or is None ("not yet"); ``shortfall`` says why, with numbers."""

    placement: dict[str, str] | None
    placed_max: int
    shortfall: str

    @property
    def fits(self) -> bool:
        return self.placement is not None


# ---------------------------------------------------------------------------------------------------------------
# Validation: independent of the search (plain Decimal sums), so a planner bug cannot hide behind itself.


def check_placement(members: Sequence[Member], nodes: Sequence[NodeFree], placement: Mapping[str, str]) -> list[str]:
    """Every way ``placement`` fails to be a witness plan, one sentence each; empty when it is valid."""
    problems: list[str] = []
    by_node = {node.name: node for node in nodes}
    names = Counter(member.name for member in members)
    problems += [f"member {name} is listed twice" for name, times in sorted(names.items()) if times > 1]
    problems += [f"placement names unknown member {name}" for name in sorted(set(placement) - set(names))]
    load: dict[str, dict[str, Decimal]] = {}
    memo: RequestsMemo = {}
    ports_on: dict[str, list[tuple[Port, str]]] = {}
    for member in members:
        node = placement.get(member.name)
        if node is None:
            problems.append(f"member {member.name} is not placed")
            continue
        if node not in by_node:
            problems.append(f"member {member.name} is placed on unknown node {node}")
            continue
        if member.pinned is not None and node != member.pinned:
            problems.append(f"member {member.name} is bound to {member.pinned} but placed on {node}")
        elif member.pinned is None and node not in member.nodes:
            problems.append(f"member {member.name} is placed on {node}, which its constraints do not allow")
        totals = load.setdefault(node, {})
        for resource, value in member_requests(member, memo).items():
            totals[resource] = totals.get(resource, Decimal(0)) + value
        if member.host_ports:
            problems += _port_problems(member, node, by_node[node], ports_on.setdefault(node, []))
    for node, totals in sorted(load.items()):
        free = by_node[node].free
        for resource, value in sorted(totals.items()):
            available = Decimal(free.get(resource, 0))
            if value > available:
                problems.append(f"node {node}: members request {amount_text(value, resource)}, "
                                f"only {amount_text(available, resource)} free")
    return problems


def _port_problems(member: Member, node: str, target: NodeFree, taken: list[tuple[Port, str]]) -> list[str]:
    problems = []
    used = [normalize_port(port) for port in target.used_ports]
    for port in sorted(member_ports(member)):
        problems += [f"node {node}: host port {port_name(port)} of {member.name} is already in use"
                     for other in used if ports_clash(port, other)][:1]
        problems += [f"node {node}: host port {port_name(port)} of {member.name} conflicts with {owner}"
                     for other, owner in taken if ports_clash(port, other)]
    taken += [(port, member.name) for port in member_ports(member)]
    return problems


# ---------------------------------------------------------------------------------------------------------------
# Solving: heuristics, then a bounded exact search.


@dataclass
class _Outcome:
    """What solving found: a plan, or the most it placed and whether it proved that no plan exists."""

    assignment: list[list[int]] | None  # per class, the node of each member (in class name order)
    placed_max: int
    steps: int
    proven: bool  # no assignment exists (search space exhausted or a bound broken at the root)
    root: Packing | None  # built only when the heuristics fail


def _solve(problem: Problem, budget: int) -> _Outcome:
    """First-fit decreasing (cheap, answers almost every gang), then the bounds, best-fit, and the search."""
    assignment, placed = _greedy(problem, best_fit=False)
    if assignment is not None:
        return _Outcome(assignment, placed, 0, False, None)
    root = Packing(problem)
    if not root.feasible() or port_clique(problem, root) is not None:
        return _Outcome(None, placed, 0, True, root)
    assignment, placed_bfd = _greedy(problem, best_fit=True)
    placed = max(placed, placed_bfd)
    if assignment is not None:
        return _Outcome(assignment, placed, 0, False, root)
    assignment, deepest, steps, exhausted = _search(root.copy(), budget)
    return _Outcome(assignment, max(placed, deepest), steps, exhausted and assignment is None, root)


def _greedy(problem: Problem, best_fit: bool) -> tuple[list[list[int]] | None, int]:
    """First-fit (node order) or best-fit (tightest node first) decreasing, placing counts per node.

    Members that do not fit are skipped, so the count placed is the largest partial plan this attempt found.
    """
    free = [list(vector) for vector in problem.free]
    ports = list(problem.ports)
    assignment: list[list[int]] = [[] for _ in problem.classes]
    placed = 0
    for c, cls in enumerate(problem.classes):
        remaining = cls.count
        for n in _tightest_first(problem, cls, free, ports) if best_fit else cls.eligible:
            count = min(class_room(cls, free[n], ports[n]), remaining)
            if count:
                for r, q in cls.need:
                    free[n][r] -= q * count
                ports[n] = ports[n] | cls.ports
                assignment[c] += [n] * count
                remaining -= count
                if not remaining:
                    break
        placed += cls.count - remaining
    return (assignment if placed == problem.members else None), placed


def _tightest_first(problem: Problem, cls: MemberClass, free: list[list[int]],
                    ports: list[frozenset[Port]]) -> list[int]:
    """Eligible nodes that can take a member of ``cls``, by the dominant share left over after one member."""
    largest = {r: max(max((vector[r] for vector in problem.free), default=1), 1) for r, _ in cls.need}

    def leftover(n: int) -> tuple[float, int]:
        return max(((free[n][r] - q) / largest[r] for r, q in cls.need), default=0.0), n

    return sorted((n for n in cls.eligible if class_room(cls, free[n], ports[n])), key=leftover)


def _search(pack: Packing, budget: int) -> tuple[list[list[int]] | None, int, int, bool]:
    """Depth-first over members one at a time, classes in placement order; iterative so depth is unbounded.

    Symmetry breaking keeps it complete: members of one class take nodes in non-decreasing node order (identical
    members are interchangeable), and of nodes whose remaining free vector, ports and eligibility are identical only
    the first is tried (swapping the rest of a plan between them gives another plan). Returns (assignment, deepest,
    steps, exhausted); exhausted without an assignment proves that none exists.
    """
    classes = pack.problem.classes
    units = [c for c, cls in enumerate(classes) for _ in cls.names]
    if not units:
        return [], 0, 0, True
    chosen = [0] * len(units)  # position in the class's eligible list
    cursor = [0] * len(units)
    seen: list[set[tuple[int, tuple[int, ...], frozenset[Port]]]] = [set() for _ in units]
    depth = deepest = steps = 0
    while depth >= 0:
        c = units[depth]
        eligible = classes[c].eligible
        advanced = False
        while cursor[depth] < len(eligible):
            if steps >= budget:
                return None, deepest, steps, False
            steps += 1
            position = cursor[depth]
            cursor[depth] += 1
            n = eligible[position]
            if not pack.k[n].get(c):
                continue
            key = pack.signature(n)
            if key in seen[depth]:
                continue
            seen[depth].add(key)
            pack.place(c, n)
            if pack.feasible(n):
                chosen[depth] = position
                advanced = True
                break
            pack.unplace(c, n)
        if advanced:
            depth += 1
            deepest = max(deepest, depth)
            if depth == len(units):
                return _assignment(pack.problem, units, chosen), deepest, steps, True
            cursor[depth] = chosen[depth - 1] if units[depth] == c else 0
            seen[depth] = set()
        else:
            depth -= 1
            if depth >= 0:
                c = units[depth]
                pack.unplace(c, classes[c].eligible[chosen[depth]])
    return None, deepest, steps, True


def _assignment(problem: Problem, units: list[int], chosen: list[int]) -> list[list[int]]:
    assignment: list[list[int]] = [[] for _ in problem.classes]
    for c, position in zip(units, chosen, strict=True):
        assignment[c].append(problem.classes[c].eligible[position])
    return assignment


def _placement(problem: Problem, members: Sequence[Member], assignment: list[list[int]]) -> dict[str, str]:
    nodes = {name: problem.nodes[n]
             for cls, where in zip(problem.classes, assignment, strict=True)
             for name, n in zip(cls.names, where, strict=True)}
    return {member.name: nodes[member.name] for member in members}


# ---------------------------------------------------------------------------------------------------------------
# Public entry points.


def plan(members: Sequence[Member], nodes: Sequence[NodeFree], budget: int = DEFAULT_BUDGET) -> PlanResult:
    """A concrete node for every member, or None with the numbers that fall short.

    ``budget`` bounds the work of the exact search (candidate nodes examined); the heuristics before it are not
    counted, and they are linear in nodes + members. Running out is a safe "not yet": a fit is never claimed
    without a full placement, and every placement is checked before it is returned.
    """
    problem = build(members, nodes)
    outcome = _solve(problem, budget)
    if outcome.assignment is not None:
        placement = _placement(problem, members, outcome.assignment)
        problems = check_placement(members, nodes, placement)
        if problems:
            raise AssertionError(f"planner produced an invalid placement: {problems}")
        return PlanResult(placement, len(members), "")
    assert outcome.root is not None
    reason = no_plan_reason(problem, outcome.root, "free")
    if reason is None:
        reason = (fragmented_reason(problem, outcome.root, "free") if outcome.proven else
                  f"no placement found within the search budget ({outcome.steps} of {budget} steps used)")
    return PlanResult(None, outcome.placed_max,
                      f"{reason}; the largest placement found holds {outcome.placed_max} of {len(members)} members")


def never_fits(members: Sequence[Member], nodes_allocatable: Sequence[NodeFree],
               budget: int = NEVER_FITS_BUDGET) -> str | None:
    """Why the gang cannot fit even on empty nodes, or None when it might.

    ``nodes_allocatable`` are the schedulable nodes with only what never leaves subtracted (DaemonSet and static
    pods, and their host ports). Every answer is a proof — a member larger than every eligible node, a member with
    no eligible node, more clashing host-port members than nodes, a resource no node has, a total no node set can
    hold, or an exhausted exact search — so a never-fits gang can safely stop blocking others.
    """
    if not members:
        return None
    present = {r for node in nodes_allocatable for r, value in node.free.items() if value > 0}
    missing = sorted({r for member in members for r in member_requests(member)} - present)
    if missing:
        return f"the gang requests {', '.join(missing)}, which no node has"
    problem = build(members, nodes_allocatable)
    outcome = _solve(problem, budget)
    if outcome.assignment is not None:
        return None
    assert outcome.root is not None
    reason = no_plan_reason(problem, outcome.root, "allocatable")
    if reason is not None:
        return reason
    if outcome.proven:
        return f"{fragmented_reason(problem, outcome.root, 'allocatable')}, even with nothing else running"
    return None

