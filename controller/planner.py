"""Placement planner: a gang fits only when every member has a concrete node — a witness plan, never a sum.

Sums of free capacity say yes while no single node can hold a member (scheduler-plugins coscheduling, Volcano's
enqueue, Kueue's quota). This module answers with an assignment of every member to a node that respects each node's
free capacity in every resource (the pod slot included) and host ports, or with a safe "not yet" and the numbers
that fall short. It is pure and deterministic: eligibility sets and free vectors are computed elsewhere, and the same
inputs give the same plan whatever order they come in.

How: identical members form classes placed as counts, never as permutations. First-fit and best-fit decreasing
answer almost every gang at once; when both fail, a bounded depth-first search with symmetry breaking and pruning
finds a plan, proves there is none, or runs out of budget (also "not yet"). Quantities are scaled to exact integers
per resource, so arithmetic stays exact and fast.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from decimal import Context, Decimal
from functools import lru_cache

from controller.capacity import PODS
from controller.predicates import ANY_HOST_IP, HostPort, is_gang_member_port, normalize_port, ports_clash
from gang.quantity import format_quantity

DEFAULT_BUDGET = 200_000
NEVER_FITS_BUDGET = 20_000

Port = HostPort  # (hostIP, hostPort, protocol), as in a container's ports

_ONE = Decimal(1)
_NO_PORTS: frozenset[Port] = frozenset()

# Exact scaling of quantities to integers: wide enough for any quantity the apiserver accepts.
_EXACT = Context(prec=120)


@dataclass(frozen=True)
class Member:
    """One gang member as the planner sees it.

    ``nodes`` is what its static predicates allow (selectors, affinity, taints; computed elsewhere). ``pinned`` is
    the node of a member already bound or reserved: it stays there and is charged like any other member, so callers
    pass free capacity that does not already subtract the gang's own pinned members. Expected members that do not
    exist yet are members like any other: planning them now is what reserves their room. A member without a
    ``pods`` request takes one pod slot.
    """

    name: str
    requests: Mapping[str, Decimal]
    nodes: frozenset[str]
    host_ports: frozenset[Port] = frozenset()
    pinned: str | None = None


@dataclass
class NodeFree:
    """A node's free capacity (allocatable minus everything already counted on it) and the host ports in use.

    A resource the node does not list is 0, the pod slots (``pods``) included: list them, as allocatable does.
    """

    name: str
    free: dict[str, Decimal]
    used_ports: AbstractSet[Port] = field(default_factory=frozenset)


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
# Requests and host ports, shared by the planner and the independent checker.


def member_requests(member: Member, memo: dict[int, tuple[Mapping, dict[str, Decimal]]] | None = None
                    ) -> dict[str, Decimal]:
    """Non-zero requests with the pod slot: the pod count is a resource like any other.

    ``memo`` (one per call over many members) reuses the result for members sharing one requests mapping.
    """
    if memo is not None:
        found = memo.get(id(member.requests))
        if found is not None and found[0] is member.requests:
            return found[1]
        result = member_requests(member)
        memo[id(member.requests)] = (member.requests, result)
        return result
    requests: dict[str, Decimal] = {}
    for resource, value in {PODS: _ONE, **member.requests}.items():
        number = value if type(value) is Decimal else Decimal(value)
        if not number.is_finite() or number < 0:
            raise ValueError(f"member {member.name}: request {resource}={value!r} is not a finite quantity >= 0")
        if number:
            requests[resource] = number
    return requests


@lru_cache(maxsize=4096)
def _normalized(ports: frozenset[Port]) -> frozenset[Port]:
    """Nodes mostly share their host ports (DaemonSets): normalize each distinct set once."""
    return frozenset(map(normalize_port, ports))


def _member_ports(member: Member) -> frozenset[Port]:
    return frozenset(normalize_port(port) for port in member.host_ports if int(port[1]) > 0)


def _any_clash(mine: Iterable[Port], used: Iterable[Port]) -> bool:
    used = tuple(used)
    return any(ports_clash(a, b) for a in mine for b in used)


def _fmt_port(port: Port) -> str:
    ip, number, protocol = port
    if is_gang_member_port(port):  # one member per node (pod anti-affinity), see predicates.gang_member_port
        return f"one-member-per-node slot of {ip if ip != ANY_HOST_IP else 'every member'} ({protocol})"
    return f"{number}/{protocol}" if ip == ANY_HOST_IP else f"{ip}:{number}/{protocol}"


def _port_text(port: Port) -> str:
    if is_gang_member_port(port):
        return "a node without other members of its gang (pod anti-affinity)"
    return f"host port {_fmt_port(port)}"


def _fmt(value: Decimal, resource: str) -> str:
    if resource == PODS:
        return f"{format_quantity(value, resource)} pod slot" + ("" if value == 1 else "s")
    return f"{format_quantity(value, resource)} {resource}"


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
    memo: dict[int, tuple[Mapping, dict[str, Decimal]]] = {}
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
                problems.append(f"node {node}: members request {_fmt(value, resource)}, "
                                f"only {_fmt(available, resource)} free")
    return problems


def _port_problems(member: Member, node: str, target: NodeFree, taken: list[tuple[Port, str]]) -> list[str]:
    problems = []
    used = [normalize_port(port) for port in target.used_ports]
    for port in sorted(_member_ports(member)):
        problems += [f"node {node}: host port {_fmt_port(port)} of {member.name} is already in use"
                     for other in used if ports_clash(port, other)][:1]
        problems += [f"node {node}: host port {_fmt_port(port)} of {member.name} conflicts with {owner}"
                     for other, owner in taken if ports_clash(port, other)]
    taken += [(port, member.name) for port in _member_ports(member)]
    return problems


# ---------------------------------------------------------------------------------------------------------------
# The problem in integer form: classes of identical members, nodes in name order, free vectors in scaled units.


@dataclass
class _Class:
    """Identical members: same requests, same allowed nodes, same host ports (and pinned alike)."""

    names: list[str]
    requests: dict[str, Decimal]
    need: list[tuple[int, int]]  # (resource index, units > 0)
    dense: list[int]  # units per resource index, zeros included
    ports: frozenset[Port]
    eligible: list[int]  # node indices, ascending
    pinned: str | None
    count: int


@dataclass
class _Problem:
    resources: list[str]
    exponents: list[int]  # one unit of resource i is 10**exponents[i]
    nodes: list[str]  # only nodes some member may use, sorted by name
    free: list[list[int]]
    ports: list[frozenset[Port]]
    classes: list[_Class]  # in placement order: pinned first, then by decreasing size
    node_classes: list[list[int]]  # classes eligible on each node, ascending
    smallest: list[list[int]]  # per node and resource, the smallest need of the classes eligible there
    signature: list[int]  # nodes with equal signatures are eligible for exactly the same classes
    members: int
    all_nodes: int

    def value(self, resource: int, units: int) -> Decimal:
        return _EXACT.scaleb(Decimal(units), self.exponents[resource])


def _exponent(value: Decimal) -> int:
    if not value.is_finite():
        raise ValueError(f"not a finite quantity: {value}")
    exponent = _EXACT.normalize(value).as_tuple().exponent
    assert isinstance(exponent, int)
    return min(exponent, 0)


def _units(value: Decimal | int, exponent: int) -> int:
    """Whole units of 10**exponent in ``value`` (exact: the exponent is at most every value's own)."""
    value = Decimal(value)
    return math.floor(value if exponent == 0 else _EXACT.scaleb(value, -exponent))


def _build(members: Sequence[Member], nodes: Sequence[NodeFree]) -> _Problem:
    _require_unique("member", [member.name for member in members])
    _require_unique("node", [node.name for node in nodes])
    groups: dict[tuple, list[Member]] = {}
    memo: dict[int, tuple[Mapping, dict[str, Decimal]]] = {}
    requests: dict[tuple, dict[str, Decimal]] = {}
    for member in members:
        wanted = member_requests(member, memo)
        allowed = frozenset((member.pinned,)) if member.pinned is not None else member.nodes
        key = (tuple(sorted(wanted.items())), allowed, _member_ports(member), member.pinned)
        groups.setdefault(key, []).append(member)
        requests[key] = wanted
    by_name = {node.name: node for node in nodes}
    usable = sorted(set().union(*(key[1] for key in groups)) & by_name.keys()) if groups else []
    index = {name: i for i, name in enumerate(usable)}
    resources = sorted({resource for wanted in requests.values() for resource in wanted})
    columns = [[by_name[name].free.get(r, 0) for name in usable] for r in resources]
    exponents = [min((_exponent(Decimal(v)) for v in {*(w[r] for w in requests.values() if r in w), *column}),
                     default=0) for r, column in zip(resources, columns, strict=True)]
    free = [list(vector) for vector in zip(*(_scaled(column, e) for column, e in zip(columns, exponents, strict=True)),
                                           strict=True)] if resources else [[] for _ in usable]
    ports = [_normalized(frozenset(by_name[name].used_ports)) if by_name[name].used_ports else _NO_PORTS
             for name in usable]
    position = {r: i for i, r in enumerate(resources)}
    classes = [
        _Class(names=sorted(m.name for m in group), requests=requests[key],
               need=[(position[r], _units(v, exponents[position[r]])) for r, v in key[0]],
               dense=[_units(requests[key].get(r, 0), e) for r, e in zip(resources, exponents, strict=True)],
               ports=key[2], eligible=sorted(index[n] for n in key[1] if n in index), pinned=key[3],
               count=len(group))
        for key, group in groups.items()
    ]
    classes.sort(key=_size_key(free, len(resources)))
    node_classes: list[list[int]] = [[] for _ in usable]
    for c, cls in enumerate(classes):
        for n in cls.eligible:
            node_classes[n].append(c)
    ids: dict[tuple[int, ...], int] = {}
    signature = [ids.setdefault(tuple(found), len(ids)) for found in node_classes]
    smallest_of = {key: [min(classes[c].dense[r] for c in key) for r in range(len(resources))] for key in ids}
    smallest = [smallest_of[tuple(found)] for found in node_classes]
    return _Problem(resources, exponents, usable, free, ports, classes, node_classes, smallest, signature,
                    len(members), len(nodes))


def _scaled(column: list[Decimal | int], exponent: int) -> list[int]:
    """One resource across all nodes; nodes mostly share values, so each distinct value is converted once."""
    cache: dict[Decimal | int, int] = {}
    return [cache[v] if v in cache else cache.setdefault(v, _units(v, exponent)) for v in column]


def _require_unique(what: str, names: list[str]) -> None:
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate {what} names: {sorted(n for n, k in Counter(names).items() if k > 1)}")


def _size_key(free: list[list[int]], width: int) -> Callable[[_Class], tuple]:
    """Pinned first (no choice), then decreasing dominant share of the largest node; ties by name for determinism."""
    largest = [max((vector[r] for vector in free), default=0) for r in range(width)]

    def share(cls: _Class) -> list[float]:
        return sorted((q / largest[r] if largest[r] > 0 else math.inf for r, q in cls.need), reverse=True)

    return lambda cls: (cls.pinned is None, [-s for s in share(cls)], len(cls.eligible), cls.names[0])


def _room(cls: _Class, free: list[int], ports: frozenset[Port]) -> int:
    """How many members of ``cls`` fit in ``free`` next to ``ports`` (capped at the class size)."""
    room = cls.count
    for r, q in cls.need:
        units = free[r] // q
        if units < room:
            if units <= 0:
                return 0
            room = units
    if cls.ports:
        return 0 if _any_clash(cls.ports, ports) else 1
    return room


# ---------------------------------------------------------------------------------------------------------------
# Mutable packing state for the exact search. Every bound it prunes with is kept current on each place/unplace,
# in time proportional to the classes eligible on the node that changed (and, when a class runs out, its nodes).


class _Packing:
    """Free capacity per node plus three bounds that any completion must satisfy:

    - slots: per class, how many more members its eligible nodes could take, each class alone;
    - usable_free: per resource, the free capacity of nodes that can still take some remaining member (capacity on
      other nodes is wasted, which is what makes the aggregate check bite as the search goes deeper);
    - total_cap: how many more members those nodes could take at most (by the smallest need per resource).

    Place and unplace must nest (last placed, first undone), as in the search. Fit counts of classes that have run
    out are then left alone, so a placement costs time in the classes still to place, not in all of them.
    """

    def __init__(self, problem: _Problem) -> None:
        self.problem = problem
        self.free = [list(vector) for vector in problem.free]
        self.ports = list(problem.ports)
        self.remaining = [cls.count for cls in problem.classes]
        self.first = 0  # every class before this one is fully placed
        self.left = problem.members
        self.k: list[dict[int, int]] = [{} for _ in problem.nodes]
        self.slots = [0] * len(problem.classes)
        self.fitting = [0] * len(problem.nodes)  # classes with members left that fit on the node
        self.cap = [0] * len(problem.nodes)  # the node's share of total_cap while it is usable
        self.total_cap = 0
        self.demand = [0] * len(problem.resources)
        self.usable_free = [0] * len(problem.resources)
        for cls in problem.classes:
            for r, q in cls.need:
                self.demand[r] += q * cls.count
        self._advance_first()
        for n in range(len(problem.nodes)):
            self._rescan(n)

    def copy(self) -> _Packing:
        twin = object.__new__(_Packing)
        twin.__dict__.update({name: list(value) if isinstance(value, list) else value
                              for name, value in self.__dict__.items()})
        twin.free = [list(vector) for vector in self.free]
        twin.k = [dict(fits) for fits in self.k]
        return twin

    def signature(self, n: int) -> tuple:
        """Nodes with equal signatures are interchangeable for the rest of the search."""
        return self.problem.signature[n], tuple(self.free[n]), self.ports[n]

    def place(self, c: int, n: int, count: int = 1) -> None:
        cls = self.problem.classes[c]
        self._withdraw(n)
        for r, q in cls.need:
            self.free[n][r] -= q * count
            self.demand[r] -= q * count
        self.ports[n] = self.ports[n] | cls.ports
        self.remaining[c] -= count
        self.left -= count
        if not self.remaining[c]:
            self._class_done(c, skip=n)
            self._advance_first()
        self._rescan(n)

    def unplace(self, c: int, n: int, count: int = 1) -> None:
        cls = self.problem.classes[c]
        self._withdraw(n)
        for r, q in cls.need:
            self.free[n][r] += q * count
            self.demand[r] += q * count
        self.ports[n] = self.ports[n] - cls.ports  # placing required no clash, so these were not there before
        self.left += count
        self.remaining[c] += count
        if self.remaining[c] == count:
            self.first = min(self.first, c)
            self._class_back(c, skip=n)
        self._rescan(n)

    def feasible(self, n: int | None = None) -> bool:
        """The bounds hold (for the classes on node ``n`` when only it changed)."""
        classes = range(len(self.slots)) if n is None else self.problem.node_classes[n]
        if any(self.remaining[c] > self.slots[c] for c in classes) or self.left > self.total_cap:
            return False
        return all(d <= f for d, f in zip(self.demand, self.usable_free, strict=True))

    def _advance_first(self) -> None:
        while self.first < len(self.remaining) and not self.remaining[self.first]:
            self.first += 1

    def _rescan(self, n: int) -> None:
        """Node ``n``'s free capacity or ports changed: refresh its fit counts, then its contribution."""
        fits, free, ports = self.k[n], self.free[n], self.ports[n]
        classes, remaining = self.problem.classes, self.remaining
        on_node = self.problem.node_classes[n]
        fitting = 0
        for c in on_node[bisect_left(on_node, self.first):]:
            if remaining[c]:
                room = _room(classes[c], free, ports)
                self.slots[c] += room - fits.get(c, 0)
                fits[c] = room
                fitting += room > 0
        self.fitting[n] = fitting
        if fitting:
            self._contribute(n)

    def _contribute(self, n: int) -> None:
        free = self.free[n]
        cap = self.problem.members
        for r, (value, smallest) in enumerate(zip(free, self.problem.smallest[n], strict=True)):
            if value > 0:
                self.usable_free[r] += value
            if smallest:
                cap = min(cap, value // smallest)
        self.cap[n] = cap
        self.total_cap += cap

    def _withdraw(self, n: int) -> None:
        if self.fitting[n]:
            self.total_cap -= self.cap[n]
            for r, value in enumerate(self.free[n]):
                if value > 0:
                    self.usable_free[r] -= value
            self.fitting[n] = 0

    def _class_done(self, c: int, skip: int) -> None:
        """Class ``c`` ran out: nodes it alone kept usable stop counting."""
        for m in self.problem.classes[c].eligible:
            if m != skip and self.k[m].get(c):
                if self.fitting[m] == 1:
                    self._withdraw(m)
                else:
                    self.fitting[m] -= 1

    def _class_back(self, c: int, skip: int) -> None:
        """Class ``c`` has members left again: count it on its nodes.

        Its fit counts are not stale after all: placements are undone in reverse order, so every node but ``skip``
        (rescanned by the caller) is exactly as it was when the class ran out.
        """
        for m in self.problem.classes[c].eligible:
            if m != skip and self.k[m].get(c):
                if not self.fitting[m]:
                    self._contribute(m)
                self.fitting[m] += 1


# ---------------------------------------------------------------------------------------------------------------
# Solving: heuristics, then a bounded exact search.


@dataclass
class _Outcome:
    assignment: list[list[int]] | None  # per class, the node of each member (in class name order)
    placed_max: int
    steps: int
    proven: bool  # no assignment exists (search space exhausted or a bound broken at the root)
    root: _Packing | None  # built only when the heuristics fail


def _solve(problem: _Problem, budget: int) -> _Outcome:
    """First-fit decreasing (cheap, answers almost every gang), then the bounds, best-fit, and the search."""
    assignment, placed = _greedy(problem, best_fit=False)
    if assignment is not None:
        return _Outcome(assignment, placed, 0, False, None)
    root = _Packing(problem)
    if not root.feasible() or _port_clique(problem, root) is not None:
        return _Outcome(None, placed, 0, True, root)
    assignment, placed_bfd = _greedy(problem, best_fit=True)
    placed = max(placed, placed_bfd)
    if assignment is not None:
        return _Outcome(assignment, placed, 0, False, root)
    assignment, deepest, steps, exhausted = _search(root.copy(), budget)
    return _Outcome(assignment, max(placed, deepest), steps, exhausted and assignment is None, root)


def _greedy(problem: _Problem, best_fit: bool) -> tuple[list[list[int]] | None, int]:
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
            count = min(_room(cls, free[n], ports[n]), remaining)
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


def _tightest_first(problem: _Problem, cls: _Class, free: list[list[int]], ports: list[frozenset[Port]]) -> list[int]:
    """Eligible nodes that can take a member of ``cls``, by the dominant share left over after one member."""
    largest = {r: max(max((vector[r] for vector in problem.free), default=1), 1) for r, _ in cls.need}

    def leftover(n: int) -> tuple[float, int]:
        return max(((free[n][r] - q) / largest[r] for r, q in cls.need), default=0.0), n

    return sorted((n for n in cls.eligible if _room(cls, free[n], ports[n])), key=leftover)


def _search(pack: _Packing, budget: int) -> tuple[list[list[int]] | None, int, int, bool]:
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
    seen: list[set[tuple]] = [set() for _ in units]
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


def _assignment(problem: _Problem, units: list[int], chosen: list[int]) -> list[list[int]]:
    assignment: list[list[int]] = [[] for _ in problem.classes]
    for c, position in zip(units, chosen, strict=True):
        assignment[c].append(problem.classes[c].eligible[position])
    return assignment


def _placement(problem: _Problem, members: Sequence[Member], assignment: list[list[int]]) -> dict[str, str]:
    nodes = {name: problem.nodes[n]
             for cls, where in zip(problem.classes, assignment, strict=True)
             for name, n in zip(cls.names, where, strict=True)}
    return {member.name: nodes[member.name] for member in members}


# ---------------------------------------------------------------------------------------------------------------
# Explaining: the first broken bound as a sentence with numbers.


def _needs(problem: _Problem, cls: _Class, short: Container[int] = ()) -> str:
    return needs_text(cls.requests, {problem.resources[r] for r in range(len(problem.resources)) if r in short},
                      cls.ports)


def needs_text(requests: Mapping[str, Decimal], short: Container[str] = (), ports: Iterable[Port] = ()) -> str:
    """What one member needs, as the reasons print it (its one pod slot only when that is what falls short)."""
    parts = [_fmt(value, resource) for resource, value in sorted(requests.items())
             if value and (resource != PODS or value != 1 or resource in short)]
    parts += dict.fromkeys(_port_text(port) for port in sorted(ports))
    return ", ".join(parts) or "nothing"


def too_big_text(name: str, requests: Mapping[str, Decimal], eligible: int, most: Mapping[str, Decimal],
                 word: str, ports: Iterable[Port] = ()) -> str:
    """Why no eligible node can hold one member, given the most of each requested resource any of them has."""
    short = sorted(r for r, q in requests.items() if q > most.get(r, 0))
    head = f"member {name} needs {needs_text(requests, short, ports)}; none of its {eligible} eligible nodes"
    if short:
        return f"{head} can hold it (the most {word} is {', '.join(_fmt(Decimal(most.get(r, 0)), r) for r in short)})"
    return f"{head} has all of that {word} at once"


def slots_text(count: int, name: str, requests: Mapping[str, Decimal], eligible: int, slots: int,
               ports: Iterable[Port] = (), limit: str = "", word: str = "free") -> str:
    """``limit``: the resource that alone allows no more (see ``limiting``), named so that users see, say, that
    the nodes' pod limits and not their cpu run out."""
    text = (f"{count} members like {name} need {needs_text(requests, (), ports)} each; "
            f"their {eligible} eligible nodes have room for only {slots}")
    if limit == PODS:
        return f"{text} (the nodes' pod limits allow no more)"
    return f"{text} ({word} {limit} alone allows no more)" if limit else text


def limiting(requests: Mapping[str, Decimal | int], frees: Iterable[Mapping[str, Decimal | int]], slots: int) -> str:
    """The requested resource whose amounts on these nodes alone hold no more than ``slots`` members, or ""
    when none does on its own (then resources together, or host ports, are what fall short)."""
    alone = dict.fromkeys(sorted(r for r, q in requests.items() if q > 0), 0)
    for free in frees:
        for resource in alone:
            alone[resource] += max(int(free.get(resource, 0) // requests[resource]), 0)
    return next((resource for resource, count in alone.items() if count <= slots), "")


def _explain(problem: _Problem, pack: _Packing, word: str) -> str | None:
    """Why no plan can exist given ``pack``'s capacity, or None when every bound holds."""
    for cls in problem.classes:
        if not cls.eligible:
            if cls.pinned is not None:
                return f"member {cls.names[0]} is bound to node {cls.pinned}, which is not available"
            return f"member {cls.names[0]} matches none of the {problem.all_nodes} nodes"
    for c, cls in enumerate(problem.classes):
        if not pack.slots[c]:
            return _too_big(problem, pack, cls, word)
    clique = _port_clique(problem, pack)
    if clique:
        return clique
    for c, cls in enumerate(problem.classes):
        if pack.slots[c] < cls.count:
            requests = {problem.resources[r]: units for r, units in cls.need}
            frees = ({problem.resources[r]: pack.free[n][r] for r, _ in cls.need} for n in cls.eligible)
            return slots_text(cls.count, cls.names[0], cls.requests, len(cls.eligible), pack.slots[c], cls.ports,
                              limiting(requests, frees, pack.slots[c]), word)
    for r, resource in enumerate(problem.resources):
        if pack.demand[r] > pack.usable_free[r]:
            return (f"the gang needs {_fmt(problem.value(r, pack.demand[r]), resource)} on nodes matching its "
                    f"constraints; they have {_fmt(problem.value(r, pack.usable_free[r]), resource)} {word}")
    if pack.left > pack.total_cap:
        usable = sum(1 for fitting in pack.fitting if fitting)
        return (f"the {usable} nodes matching the gang's constraints have room for at most {pack.total_cap} of its "
                f"{pack.left} members")
    return None


def _too_big(problem: _Problem, pack: _Packing, cls: _Class, word: str) -> str:
    best = {r: max(pack.free[n][r] for n in cls.eligible) for r, _ in cls.need}
    roomy = [n for n in cls.eligible if all(pack.free[n][r] >= q for r, q in cls.need)]
    if roomy:
        return (f"member {cls.names[0]} needs {_needs(problem, cls)}; none of its {len(cls.eligible)} eligible nodes "
                f"has its host ports free ({len(roomy)} have room but the ports are in use)")
    most = {problem.resources[r]: problem.value(r, value) for r, value in best.items()}
    return too_big_text(cls.names[0], cls.requests, len(cls.eligible), most, word, cls.ports)


def _port_clique(problem: _Problem, pack: _Packing) -> str | None:
    """Members whose host ports pairwise clash need distinct nodes: more of them than such nodes cannot fit."""
    users: dict[tuple[int, str], dict[str, set[int]]] = {}
    for c, cls in enumerate(problem.classes):
        for ip, number, protocol in cls.ports:
            users.setdefault((number, protocol), {}).setdefault(ip, set()).add(c)
    for (number, protocol), by_ip in sorted(users.items()):
        wildcard = by_ip.get(ANY_HOST_IP, set())
        for ip in sorted(set(by_ip) - {ANY_HOST_IP}) or [ANY_HOST_IP]:
            clique = wildcard | by_ip.get(ip, set())
            port = (ip, number, protocol)
            room = {n for c in clique for n in problem.classes[c].eligible if not _any_clash([port], pack.ports[n])}
            size = sum(problem.classes[c].count for c in clique)
            if size > len(room) and is_gang_member_port(port):
                return (f"{size} members must run on separate nodes (required pod anti-affinity), but only "
                        f"{len(room)} of their eligible nodes have no other member of their gang")
            if size > len(room):
                return (f"{size} members use host port {_fmt_port(port)}, but only {len(room)} of their eligible "
                        f"nodes have it free")
    return None


def _fragmented(problem: _Problem, root: _Packing, word: str) -> str:
    usable = sum(1 for fitting in root.fitting if fitting)
    tightest = max(range(len(problem.resources)), default=None,
                   key=lambda r: root.demand[r] / root.usable_free[r] if root.usable_free[r] else math.inf)
    if tightest is None:
        return f"no placement of all {problem.members} members exists on the {usable} nodes matching its constraints"
    resource = problem.resources[tightest]
    return (f"no placement of all {problem.members} members exists on the {usable} nodes matching the gang's "
            f"constraints: they have {_fmt(problem.value(tightest, root.usable_free[tightest]), resource)} {word} for "
            f"{_fmt(problem.value(tightest, root.demand[tightest]), resource)} needed, but fragmented")


# ---------------------------------------------------------------------------------------------------------------
# Public entry points.


def plan(members: Sequence[Member], nodes: Sequence[NodeFree], budget: int = DEFAULT_BUDGET) -> PlanResult:
    """A concrete node for every member, or None with the numbers that fall short.

    ``budget`` bounds the work of the exact search (candidate nodes examined); the heuristics before it are not
    counted, and they are linear in nodes + members. Running out is a safe "not yet": a fit is never claimed
    without a full placement, and every placement is checked before it is returned.
    """
    problem = _build(members, nodes)
    outcome = _solve(problem, budget)
    if outcome.assignment is not None:
        placement = _placement(problem, members, outcome.assignment)
        problems = check_placement(members, nodes, placement)
        if problems:
            raise AssertionError(f"planner produced an invalid placement: {problems}")
        return PlanResult(placement, len(members), "")
    assert outcome.root is not None
    reason = _explain(problem, outcome.root, "free")
    if reason is None:
        reason = (_fragmented(problem, outcome.root, "free") if outcome.proven else
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
    problem = _build(members, nodes_allocatable)
    outcome = _solve(problem, budget)
    if outcome.assignment is not None:
        return None
    assert outcome.root is not None
    reason = _explain(problem, outcome.root, "allocatable")
    if reason is not None:
        return reason
    if outcome.proven:
        return f"{_fragmented(problem, outcome.root, 'allocatable')}, even with nothing else running"
    return None
