"""A gang placement problem: members, nodes with their free capacity, and the same in exact integers.

The planner (``controller/planner.py``) searches this model and ``controller/explain.py`` words what it finds; both
read the same classes of identical members, free vectors scaled to integers per resource, and the bounds that any
completion of a partial plan must satisfy (``Packing``).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from decimal import Context, Decimal
from functools import lru_cache

from controller.capacity import PODS
from controller.predicates import ANY_HOST_IP, HostPort, normalize_port, ports_clash

Port = HostPort  # (hostIP, hostPort, protocol), as in a container's ports

_ONE = Decimal(1)
_NO_PORTS: frozenset[Port] = frozenset()

# Exact scaling of quantities to integers: wide enough for any quantity the apiserver accepts.
_EXACT = Context(prec=120)


@dataclass(frozen=True)
class Member:
    """One gang member as the planner sees it.

    ``nodes`` is what its filters allow (selectors, affinity, taints; computed elsewhere). ``pinned`` is
    the node of a member already bound or reserved: it stays there and is charged like any other member, so callers
    pass free capacity that does not already subtract the gang's own pinned members. Expected members that do not
    exist yet are members like any other: planning them now is what reserves their room. A member without a
    ``pods`` request takes one pod slot. A member no node admits is an ``Unplaceable``.
    """

    name: str
    requests: Mapping[str, Decimal]
    nodes: frozenset[str]
    host_ports: frozenset[Port] = frozenset()
    pinned: str | None = None


@dataclass(frozen=True)
class Unplaceable(Member):
    """A member whose filters no node passes (``nodes`` empty): ``no_node`` says what rules out every node (a
    subclass, so that the members that do have nodes, nearly all, carry nothing more)."""

    no_node: str = ""


def no_node_of(member: Member) -> str:
    """What rules out every node for ``member``, "" when unknown (or some node admits it)."""
    return member.no_node if isinstance(member, Unplaceable) else ""


@dataclass
class NodeFree:
    """A node's free capacity (allocatable minus everything already counted on it) and the host ports in use.

    A resource the node does not list is 0, the pod slots (``pods``) included: list them, as allocatable does.
    """

    name: str
    free: dict[str, Decimal]
    used_ports: AbstractSet[Port] = field(default_factory=frozenset)


# ---------------------------------------------------------------------------------------------------------------
# Requests and host ports, shared by the planner and the independent checker.


# Per call over many members: requests mappings by id (with the mapping, so that a reused id is told apart).
RequestsMemo = dict[int, tuple[Mapping[str, Decimal], dict[str, Decimal]]]


def member_requests(member: Member, memo: RequestsMemo | None = None) -> dict[str, Decimal]:
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


def member_ports(member: Member) -> frozenset[Port]:
    return frozenset(normalize_port(port) for port in member.host_ports if int(port[1]) > 0)


def any_clash(mine: Iterable[Port], used: Iterable[Port]) -> bool:
    used = tuple(used)
    return any(ports_clash(a, b) for a in mine for b in used)


# ---------------------------------------------------------------------------------------------------------------
# The problem in integer form: classes of identical members, nodes in name order, free vectors in scaled units.

# What makes members identical: requests (with the pod slot), allowed nodes, normalized host ports, the pin.
_ClassKey = tuple[tuple[tuple[str, Decimal], ...], frozenset[str], frozenset[Port], str | None]


@dataclass
class MemberClass:
    """Identical members: same requests, same allowed nodes, same host ports (and pinned alike)."""

    names: list[str]
    requests: dict[str, Decimal]
    need: list[tuple[int, int]]  # (resource index, units > 0)
    dense: list[int]  # units per resource index, zeros included
    ports: frozenset[Port]
    eligible: list[int]  # node indices, ascending
    pinned: str | None
    count: int
    no_node: str = ""  # with no eligible node: what rules out every node for its first member (``Member.no_node``)


@dataclass
class Problem:
    """The members as classes and the nodes they may use, in exact integer units per resource."""

    resources: list[str]
    exponents: list[int]  # one unit of resource i is 10**exponents[i]
    nodes: list[str]  # only nodes some member may use, sorted by name
    free: list[list[int]]
    ports: list[frozenset[Port]]
    classes: list[MemberClass]  # in placement order: pinned first, then by decreasing size
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


def build(members: Sequence[Member], nodes: Sequence[NodeFree]) -> Problem:
    _require_unique("member", [member.name for member in members])
    _require_unique("node", [node.name for node in nodes])
    groups: dict[_ClassKey, list[Member]] = {}
    memo: RequestsMemo = {}
    requests: dict[_ClassKey, dict[str, Decimal]] = {}
    for member in members:
        wanted = member_requests(member, memo)
        allowed = frozenset((member.pinned,)) if member.pinned is not None else member.nodes
        key = (tuple(sorted(wanted.items())), allowed, member_ports(member), member.pinned)
        groups.setdefault(key, []).append(member)
        requests[key] = wanted
    by_name = {node.name: node for node in nodes}
    allowed_sets = {key[1] for key in groups}
    usable = sorted(_within(allowed_sets, by_name.keys()))
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
        MemberClass(names=sorted(m.name for m in group), requests=requests[key],
                    need=[(position[r], _units(v, exponents[position[r]])) for r, v in key[0]],
                    dense=[_units(requests[key].get(r, 0), e) for r, e in zip(resources, exponents, strict=True)],
                    ports=key[2], eligible=sorted(index[n] for n in _within({key[1]}, index.keys())), pinned=key[3],
                    count=len(group), no_node="" if key[1] else no_node_of(min(group, key=lambda m: m.name)))
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
    return Problem(resources, exponents, usable, free, ports, classes, node_classes, smallest, signature,
                   len(members), len(nodes))


def _within(sets: AbstractSet[frozenset[str]], names: AbstractSet[str]) -> AbstractSet[str]:
    """The names in some of ``sets``, walking the smaller side: members may allow every node of a big cluster while
    a plan is asked over a few of them (one topology domain)."""
    if sum(len(allowed) for allowed in sets) <= len(names):
        return set().union(*sets) & names
    return {name for name in names if any(name in allowed for allowed in sets)}


def _scaled(column: list[Decimal | int], exponent: int) -> list[int]:
    """One resource across all nodes; nodes mostly share values, so each distinct value is converted once."""
    cache: dict[Decimal | int, int] = {}
    return [cache[v] if v in cache else cache.setdefault(v, _units(v, exponent)) for v in column]


def _require_unique(what: str, names: list[str]) -> None:
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate {what} names: {sorted(n for n, k in Counter(names).items() if k > 1)}")


def _size_key(free: list[list[int]], width: int) -> Callable[[MemberClass], tuple[bool, list[float], int, str]]:
    """Pinned first (no choice), then decreasing dominant share of the largest node; ties by name for determinism."""
    largest = [max((vector[r] for vector in free), default=0) for r in range(width)]

    def share(cls: MemberClass) -> list[float]:
        return sorted((q / largest[r] if largest[r] > 0 else math.inf for r, q in cls.need), reverse=True)

    return lambda cls: (cls.pinned is None, [-s for s in share(cls)], len(cls.eligible), cls.names[0])


def class_room(cls: MemberClass, free: list[int], ports: frozenset[Port]) -> int:
    """How many members of ``cls`` fit in ``free`` next to ``ports`` (capped at the class size)."""
    room = cls.count
    for r, q in cls.need:
        units = free[r] // q
        if units < room:
            if units <= 0:
                return 0
            room = units
    if cls.ports:
        return 0 if any_clash(cls.ports, ports) else 1
    return room


# ---------------------------------------------------------------------------------------------------------------
# Mutable packing state for the exact search. Every bound it prunes with is kept current on each place/unplace,
# in time proportional to the classes eligible on the node that changed (and, when a class runs out, its nodes).


class Packing:
    """Free capacity per node plus three bounds that any completion must satisfy:

    - slots: per class, how many more members its eligible nodes could take, each class alone;
    - usable_free: per resource, the free capacity of nodes that can still take some remaining member (capacity on
      other nodes is wasted, which is what makes the aggregate check bite as the search goes deeper);
    - total_cap: how many more members those nodes could take at most (by the smallest need per resource).

    Place and unplace must nest (last placed, first undone), as in the search. Fit counts of classes that have run
    out are then left alone, so a placement costs time in the classes still to place, not in all of them.
    """

    def __init__(self, problem: Problem) -> None:
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

    def copy(self) -> Packing:
        twin = object.__new__(Packing)
        twin.__dict__.update({name: list(value) if isinstance(value, list) else value
                              for name, value in self.__dict__.items()})
        twin.free = [list(vector) for vector in self.free]
        twin.k = [dict(fits) for fits in self.k]
        return twin

    def signature(self, n: int) -> tuple[int, tuple[int, ...], frozenset[Port]]:
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
                room = class_room(classes[c], free, ports)
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


@dataclass(frozen=True)
class Clique:
    """Members whose host ports pairwise clash need distinct nodes: ``size`` of them on ``port``, but only ``room``
    of their eligible nodes have it free."""

    port: Port
    size: int
    room: int


def port_clique(problem: Problem, pack: Packing) -> Clique | None:
    """The first port whose clashing members outnumber the nodes that have it free (no plan can exist), else None."""
    users: dict[tuple[int, str], dict[str, set[int]]] = {}
    for c, cls in enumerate(problem.classes):
        for ip, number, protocol in cls.ports:
            users.setdefault((number, protocol), {}).setdefault(ip, set()).add(c)
    for (number, protocol), by_ip in sorted(users.items()):
        wildcard = by_ip.get(ANY_HOST_IP, set())
        for ip in sorted(set(by_ip) - {ANY_HOST_IP}) or [ANY_HOST_IP]:
            clique = wildcard | by_ip.get(ip, set())
            port = (ip, number, protocol)
            room = {n for c in clique for n in problem.classes[c].eligible if not any_clash([port], pack.ports[n])}
            size = sum(problem.classes[c].count for c in clique)
            if size > len(room):
                return Clique(port, size, len(room))
    return None
