"""Topology-aware gangs: the gang (or each of its units) inside one domain (nodes sharing one value of a label).

A root annotated ``kubenexus.io/topology-required: <label key>`` is released only with a witness plan inside one
domain of that label; ``kubenexus.io/topology-preferred`` asks for as few domains as possible and falls back to any
placement rather than waiting. ``kubenexus.io/topology-required.<role>`` binds only the members of one role, and
JobSet's ``alpha.jobset.sigs.k8s.io/exclusive-topology`` each child Job to a domain of its own: those are units,
planned one after the other inside their domains (``plan_request``). Nodes without the label are in no domain.
Pure: the planner (``planner.plan``, ``planner.never_fits``) does the packing, this module only chooses which
nodes it may use and words the outcome.

Which domain: the tightest that fits, so that big domains stay free for big gangs. Tightness is the free capacity
a domain would have left in the gang's dominant resource (the one it needs most of, as a share of the candidate
domains' free total), summed over the domain's nodes; ties by name. Domains whose sums or slot counts cannot hold
the gang are skipped without planning; when no domain fits, the few largest are planned, so that the reason names
the best one's shortfall (planning every domain of a big cluster for every waiting gang would cost the pass too
much). The controller hands in its domains as a ``DomainTable`` whose sums its state keeps current with every
charge (``ClusterState.domain_sums``), so a decision never walks every node of the gang to add them up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import cached_property
from heapq import heapify, heappop, nsmallest
from operator import methodcaller

from controller.explain import amount_text
from controller.planner import PlanResult, check_placement, never_fits, plan
from controller.problem import Member, NodeFree, Unplaceable, member_ports, member_requests
from gang import keys

_ZERO = Decimal(0)
Solve = Callable[[Sequence[Member], Sequence[NodeFree]], PlanResult]
# The gang's own view of some nodes (less room held for other gangs, nominated pods, a starving gang's limits), to
# plan on; the nodes handed in are read for sums and order only. Identity by default.
View = Callable[[Sequence[NodeFree]], Sequence[NodeFree]]
_PREFERRED_WIDENINGS = 3  # multi-domain attempts of a preferred gang before any placement
_SHORTFALL_DOMAINS = 3  # the largest domains planned to word a required gang's "not yet"


@dataclass(frozen=True)
class Topology:
    """One topology request: the node label whose values are domains, whether one domain is required, and whom it
    binds: the whole gang, the members of one ``role``, or (``exclusive``) each child Job in a domain of its own."""

    key: str
    required: bool
    role: str = ""
    exclusive: bool = False

    @property
    def whole(self) -> bool:
        return not self.role and not self.exclusive

    def unit(self, role: str, child: str) -> str | None:
        """The unit (members that share one domain) of a member of ``role`` in child Job ``child``; None: free."""
        if self.exclusive:
            return child or None
        if self.role:
            return self.role if role == self.role else None
        return ""


def described(request: Request) -> list[dict[str, str | bool]]:
    """The request as the PodGroup status and ``simulate`` show it."""
    return [{"key": t.key, "mode": "Required" if t.required else "Preferred",
             **({"role": t.role} if t.role else {}), **({"exclusive": True} if t.exclusive else {})} for t in request]


# A gang's request: one whole-gang topology, or per-role and exclusive ones (none: empty).
Request = tuple[Topology, ...]
# Per member name: its role and child Job.
Roles = Mapping[str, tuple[str, str]]
Labels = Mapping[str, str]  # node name -> its domain (its value of the label); nodes without the label are absent
Labeller = Callable[[str], Labels]  # a label key -> the domains of nodes


def topology_of(annotations: Mapping[str, str]) -> Topology | None:
    """The root's whole-gang request (admission refuses a root with both; required would win)."""
    for annotation, required in ((keys.TOPOLOGY_REQUIRED, True), (keys.TOPOLOGY_PREFERRED, False)):
        value = annotations.get(annotation)
        if isinstance(value, str) and value:
            return Topology(value, required)
    return None


def request_of(annotations: Mapping[str, str]) -> Request:
    """The root's requests: the whole gang's; else JobSet's exclusive topology and the per-role ones."""
    whole = topology_of(annotations)
    if whole is not None:
        return (whole,)
    found = []
    exclusive = annotations.get(keys.JOBSET_EXCLUSIVE_TOPOLOGY)
    if isinstance(exclusive, str) and exclusive:
        found.append(Topology(exclusive, True, exclusive=True))
    for annotation, value in sorted(annotations.items()):
        role = annotation.removeprefix(keys.TOPOLOGY_REQUIRED_ROLE_PREFIX)
        if role != annotation and role and isinstance(value, str) and value:
            found.append(Topology(value, True, role=role))
    return tuple(found)


@dataclass(frozen=True)
class TopologyPlan:
    """A plan (or "not yet") and the domains it uses, in name order; ``fallback``: a preferred gang found no plan
    within a few domains, and its caller should plan it anywhere."""

    result: PlanResult
    domains: tuple[str, ...] = ()
    fallback: bool = False


def _same(nodes: Sequence[NodeFree]) -> Sequence[NodeFree]:
    return nodes


def domains_of(nodes: Sequence[NodeFree], label: Labels) -> dict[str, list[NodeFree]]:
    """The nodes of each domain, by domain name; nodes without the label are in none."""
    found: dict[str, list[NodeFree]] = {}
    for node in nodes:
        value = label.get(node.name)
        if value is not None:
            found.setdefault(value, []).append(node)
    return found


@dataclass(frozen=True)
class DomainTable:
    """A gang's domains as its caller keeps them: each domain's nodes by name (in the planner's order), the node
    with its free capacity by name (looked up only for the domains a plan or slot count needs), and the free totals
    per resource of the domains whose caller already has them (the others are summed here)."""

    names: Mapping[str, Sequence[str]]
    node: Callable[[str], NodeFree]
    totals: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    reach: frozenset[str] | None = None  # the node set the table was cut to (each domain has a node of it), if any
    total: Mapping[str, Decimal] | None = None  # the totals of every domain, summed, if the caller keeps them
    # Whether some nodes (by name) have room for each shape of the gang's members counted alone, from what the
    # caller keeps (room indexes); else counted here from each node's free capacity.
    room: Callable[[Sequence[str]], bool] | None = None


def table_of(nodes: Sequence[NodeFree], label: Labels) -> DomainTable:
    """The domains of ``nodes`` (nodes without the label are in none), nothing summed yet."""
    by_name = {node.name: node for node in nodes}
    return DomainTable({d: [n.name for n in ns] for d, ns in domains_of(nodes, label).items()}, by_name.__getitem__)


def plan_in_domains(members: Sequence[Member], nodes: Sequence[NodeFree], label: Labels, topology: Topology,
                    solve: Solve = plan, view: View | None = None) -> TopologyPlan:
    """``plan_in_table`` over the domains of ``nodes``."""
    return plan_in_table(members, table_of(nodes, label), topology, solve, view)


def plan_in_table(members: Sequence[Member], table: DomainTable, topology: Topology, solve: Solve = plan,
                  view: View | None = None) -> TopologyPlan:
    """A plan within one domain (the tightest that fits); for a preferred gang, else within the fewest of the
    largest domains tried, else ``fallback``. A required gang's "not yet" names the best domain's shortfall.

    Sums and order come from the table, each plan is made on ``view`` of a domain's nodes (a big cluster's nodes
    are not all seen as the gang sees them for every gang). The planner only uses the nodes it is given, so members
    need not be cut down to a domain's nodes."""
    seen: View = view or _same
    domains = _Domains(members, table)
    for name in domains.tightest_first():
        if domains.holds(name):
            found = solve(members, seen(domains.nodes(name)))
            if found.fits:
                return TopologyPlan(found, (name,))
    if not topology.required:
        return _widened(members, domains, lambda chosen, nodes: solve(chosen, seen(nodes)))
    if not domains.names:
        return TopologyPlan(PlanResult(None, 0, _no_domain(members, topology)))
    best_name, best = "", PlanResult(None, -1, "")
    for name in sorted(domains.largest_first(_SHORTFALL_DOMAINS), key=domains.tightness):
        found = solve(members, seen(domains.nodes(name)))
        if found.placed_max > best.placed_max:
            best_name, best = name, found
    count = len(domains.names)
    of = f"the best of the {_SHORTFALL_DOMAINS} largest of {count}" if count > _SHORTFALL_DOMAINS else ""
    reason = (f"no {topology.key} domain has room for the whole gang now: {of + ', ' if of else ''}{best_name} has "
              f"room for {best.placed_max} of {len(members)} members ({best.shortfall})")
    return TopologyPlan(PlanResult(None, best.placed_max, reason), (best_name,))


def never_fits_in_domains(members: Sequence[Member], allocatable: Sequence[NodeFree], label: Labels,
                          topology: Topology) -> str | None:
    """Why no domain could ever hold the gang (naming the largest domain's capacity), or None when one might.
    Only a required topology can make a gang never fit: a preferred one falls back to any placement."""
    if not topology.required:
        return None
    domains = _Domains(members, table_of(allocatable, label))
    if not domains.names:
        return _no_domain(members, topology) + ", even with nothing else running"
    largest = domains.largest_first()
    reasons = {}
    for name in largest:  # the largest first: the likeliest to hold it
        reason = never_fits(members, domains.nodes(name))
        if reason is None:
            return None
        reasons[name] = reason
    return (f"no {topology.key} domain could ever hold the gang: the largest of {len(largest)}, {largest[0]}, has "
            f"{domains.capacity_text(largest[0])} allocatable ({reasons[largest[0]]})")


def domains_used(placement: Mapping[str, str], label: Labels) -> tuple[str, ...]:
    """The domains a plan's nodes are in, by name (nodes without the label are left out)."""
    return tuple(sorted({value for node in set(placement.values()) if (value := label.get(node)) is not None}))


# --- per-role and exclusive requests: units of members, each inside one domain --------------------------------------


@dataclass(frozen=True)
class Unit:
    """Members that must share one domain of ``topology.key`` (a role's, a child Job's, or the whole gang's)."""

    topology: Topology
    name: str
    members: tuple[Member, ...]

    def text(self) -> str:
        what = (f"child Job {self.name}" if self.topology.exclusive else f"role {self.name}" if self.name
                else "the gang")
        return f"{what} ({len(self.members)} member(s))"


def units_of(members: Sequence[Member], request: Request, roles: Roles) -> tuple[list[Unit], list[Member]]:
    """The units of a request (a member joins the first topology that binds it; largest units first) and the
    members no topology binds."""
    grouped: dict[tuple[Topology, str], list[Member]] = {}
    free = []
    for member in members:
        role, child = roles.get(member.name, ("", ""))
        for topology in request:
            unit = topology.unit(role, child)
            if unit is not None:
                grouped.setdefault((topology, unit), []).append(member)
                break
        else:
            free.append(member)
    units = [Unit(topology, name, tuple(group)) for (topology, name), group in grouped.items()]
    units.sort(key=lambda u: (-len(u.members), u.name))
    return units, free


def plan_request(members: Sequence[Member], nodes: Sequence[NodeFree], labeller: Labeller, request: Request,
                 roles: Roles, solve: Solve = plan, budget: int = 64, view: View | None = None) -> TopologyPlan:
    """A plan honouring every topology of ``request``: a whole-gang one by ``plan_in_domains``; units by a search
    over each unit's domains (tightest first; exclusive units on distinct domains), each unit planned inside its
    domain on what the units before it left, then the free members anywhere. ``budget`` bounds the plans tried.

    Exact for units alone (distinct domains do not interact); with free members it may miss a plan where another
    placement of a unit inside the same domain would have left them room (then "not yet", never a wrong plan).
    ``view``: as for ``plan_in_domains`` (units are planned on the view of every node, each taking from the next)."""
    if len(request) == 1 and request[0].whole:
        return plan_in_domains(members, nodes, labeller(request[0].key), request[0], solve, view)
    if view is not None:
        nodes = view(nodes)
    units, free = units_of(members, request, roles)
    labels = {t.key: labeller(t.key) for t in request}
    search = _UnitSearch(units, free, nodes, labels, solve, budget)
    found = search.run({node.name: node for node in nodes}, {}, [])
    if found is None:
        return TopologyPlan(PlanResult(None, search.deepest, search.reason()))
    placement, domains = found
    ordered = {m.name: placement[m.name] for m in members}
    problems = check_placement(members, nodes, ordered)
    if problems:
        raise AssertionError(f"topology planner produced an invalid placement: {problems}")
    return TopologyPlan(PlanResult(ordered, len(members), ""), tuple(sorted(set(domains))))


class _UnitSearch:
    """Depth-first over the units' domains; remembers the deepest failure to word the "not yet"."""

    def __init__(self, units: list[Unit], free: list[Member], nodes: Sequence[NodeFree],
                 labels: Mapping[str, Labels], solve: Solve, budget: int) -> None:
        self.units, self.free, self.order, self.labels = units, free, [n.name for n in nodes], labels
        self.solve, self.budget, self.tried = solve, budget, 0
        self.deepest, self.failed, self.shortfall = 0, "", ""

    def run(self, nodes: dict[str, NodeFree], placement: dict[str, str],
            chosen: list[tuple[Topology, str]]) -> tuple[dict[str, str], list[str]] | None:
        depth = len(chosen)
        if depth == len(self.units):
            if not self.free:
                return placement, [domain for _, domain in chosen]
            return self._rest(nodes, placement, chosen)
        unit = self.units[depth]
        topology = unit.topology
        taken = {domain for t, domain in chosen if t == topology and topology.exclusive}
        current = [nodes[name] for name in self.order]
        table = table_of(current, self.labels[topology.key])
        domains = _Domains(unit.members, replace(table, names={d: ns for d, ns in table.names.items()
                                                              if d not in taken}))
        for domain in domains.tightest_first():
            if not domains.holds(domain) or self.tried >= self.budget:
                continue
            self.tried += 1
            found = self.solve(unit.members, domains.nodes(domain))
            if found.placement is None:
                self._fail(len(placement) + found.placed_max, unit.text(), f"{topology.key} domain {domain}: "
                                                                        f"{found.shortfall}")
                continue
            deeper = self.run(_charged(nodes, unit.members, found.placement), {**placement, **found.placement},
                              [*chosen, (topology, domain)])
            if deeper is not None:
                return deeper
        if not domains.names or not self.failed:
            self._fail(len(placement), unit.text(), f"no {topology.key} domain"
                       f"{' left for it' if taken else ''} has room for it now")
        return None

    def _rest(self, nodes: dict[str, NodeFree], placement: dict[str, str],
              chosen: list[tuple[Topology, str]]) -> tuple[dict[str, str], list[str]] | None:
        if self.tried >= self.budget:
            return None
        self.tried += 1
        found = self.solve(self.free, [nodes[name] for name in self.order])
        if found.placement is None:
            self._fail(len(placement) + found.placed_max, f"the {len(self.free)} other member(s)", found.shortfall)
            return None
        return {**placement, **found.placement}, [domain for _, domain in chosen]

    def _fail(self, placed: int, what: str, why: str) -> None:
        if placed >= self.deepest or not self.failed:
            self.deepest, self.failed, self.shortfall = max(placed, self.deepest), what, why

    def reason(self) -> str:
        budget = f" (gave up after {self.tried} plans)" if self.tried >= self.budget else ""
        return f"no placement keeps each unit in one domain now{budget}: {self.failed}: {self.shortfall}"


def never_fits_request(members: Sequence[Member], allocatable: Sequence[NodeFree], labeller: Labeller,
                       request: Request, roles: Roles) -> str | None:
    """Why no domains could ever hold the gang as its request asks (a unit no domain could hold, more exclusive
    units than domains), or None when they might."""
    if len(request) == 1 and request[0].whole:
        return never_fits_in_domains(members, allocatable, labeller(request[0].key), request[0])
    units, _ = units_of(members, request, roles)
    for topology in request:
        if topology.exclusive:
            count = sum(1 for u in units if u.topology == topology)
            domains = domains_of(allocatable, labeller(topology.key))
            if count > len(domains):
                names = sorted(domains)
                shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
                return (f"{count} child Jobs each need a {topology.key} domain of their own "
                        f"({keys.JOBSET_EXCLUSIVE_TOPOLOGY}), and there are {len(domains)}" +
                        (f": {shown}" if names else ""))
    for unit in units:
        reason = never_fits_in_domains(unit.members, allocatable, labeller(unit.topology.key), unit.topology)
        if reason is not None:
            return f"{unit.text()}: {reason}"
    return None


def anchored(members: Sequence[Member], request: Request, roles: Roles, placed: Mapping[str, str],
             labeller: Labeller, nodes: Iterable[str]) -> list[Member]:
    """Members of a started gang restricted to the domain their unit already runs in (``placed``: where the gang's
    members are charged, by name): replacements, late and extra members join their unit."""
    if not any(t.required for t in request):
        return list(members)
    everyone = dict.fromkeys([*placed, *(m.name for m in members)])
    units, _ = units_of([Member(name, {}, frozenset()) for name in everyone], request, roles)
    unit_of = {m.name: unit for unit in units for m in unit.members}
    result = []
    names = list(nodes)
    for member in members:
        unit = unit_of.get(member.name)
        if unit is None:
            result.append(member)
            continue
        label = labeller(unit.topology.key)
        domains = {label.get(placed[m.name]) for m in unit.members if m.name in placed}
        if len(domains) != 1 or None in domains:
            result.append(member)
            continue
        result += within([member], [name for name in names if label.get(name) in domains])
    return result


def _charged(nodes: Mapping[str, NodeFree], members: Sequence[Member], placement: Mapping[str, str]
             ) -> dict[str, NodeFree]:
    """``nodes`` with the placed members' requests and host ports taken."""
    result = dict(nodes)
    memo: dict[int, tuple[Mapping[str, Decimal], dict[str, Decimal]]] = {}
    for member in members:
        node = result[placement[member.name]]
        free = dict(node.free)
        for resource, value in member_requests(member, memo).items():
            free[resource] = Decimal(free.get(resource, 0)) - value
        result[node.name] = NodeFree(node.name, free, frozenset(node.used_ports) | member_ports(member))
    return result


# --- pieces --------------------------------------------------------------------------------------------------------


class _Domains:
    """The candidate domains of a gang (a node for every member, every pinned member's node) with their free totals
    in the resources it requests (the table's, else summed once); nodes are looked up per domain when needed."""

    def __init__(self, members: Sequence[Member], table: DomainTable) -> None:
        self.demand = _demand(members)
        self._members = members
        self._node = table.node
        self._room = table.room
        self._nodes: dict[str, list[NodeFree]] = {}
        pinned = {m.pinned for m in members if m.pinned is not None}
        # interned: mostly one per placement key; a table cut to a set has a node of it in every domain
        sets = [s for s in {m.nodes for m in members if m.pinned is None} if s is not table.reach]
        self.names: Mapping[str, Sequence[str]] = table.names  # the table's own (a big cluster's, not copied)
        if pinned or sets:
            self.names = {name: names for name, names in table.names.items()
                          if (not pinned or pinned <= set(names))
                          and all(any(node in allowed for node in names) for allowed in sets)}
        known = table.totals  # read with .get: a table's totals may lack a resource
        self.totals: Mapping[str, Mapping[str, Decimal]] = known
        if not known.keys() >= self.names.keys():
            self.totals = {name: found if (found := known.get(name)) is not None
                           else {r: _free(self.nodes(name), r) for r in self.demand} for name in self.names}
        self.dominant = self._dominant(table.total if len(self.names) == len(table.names) else None)

    def nodes(self, name: str) -> list[NodeFree]:
        """The domain's nodes with their free capacity (looked up once)."""
        found = self._nodes.get(name)
        if found is None:
            found = self._nodes[name] = list(map(self._node, self.names[name]))
        return found

    @cached_property
    def shapes(self) -> Counter[tuple[tuple[str, Decimal], ...]]:
        """The members' requests, counted (for tables without room indexes)."""
        memo: dict[int, tuple[Mapping[str, Decimal], dict[str, Decimal]]] = {}
        return Counter(tuple(sorted(member_requests(m, memo).items())) for m in self._members)

    def _dominant(self, known: Mapping[str, Decimal] | None) -> str:
        """The resource the gang needs most of, as a share of the candidate domains' free total (``known``, else
        summed here); ties by name."""
        def share(resource: str) -> tuple[Decimal, str]:
            total = (known.get(resource, _ZERO) if known is not None
                     else sum((self.totals[name].get(resource, _ZERO) for name in self.names), _ZERO))
            return (self.demand[resource] / total if total > 0 else Decimal("Infinity")), resource

        return max(self.demand, key=share) if self.demand else ""

    def holds(self, name: str) -> bool:
        """The domain's sums hold the gang, and its nodes have room for each shape of member counted alone
        (necessary, not sufficient; sufficient for a gang of identical members without host ports)."""
        totals = self.totals[name]
        if not all(totals.get(r, _ZERO) >= value for r, value in self.demand.items()):
            return False
        if self._room is not None:
            return self._room(self.names[name])
        return all(_slots(self.nodes(name), requests, count) >= count for requests, count in self.shapes.items())

    def tightness(self, name: str) -> tuple[Decimal, str]:
        """What the domain would have left in the dominant resource (its total there, less a constant), then its
        name."""
        return self.totals[name].get(self.dominant, _ZERO), name

    def tightest_first(self) -> Iterator[str]:
        """The domains by ``tightness``, lazily (a heap): the walk mostly ends at one of the first, so the hundreds of
        racks of a big cluster are not all ordered for every gang."""
        names = list(self.names)  # C-level from here: hundreds of domains per gang
        heap = list(zip(map(methodcaller("get", self.dominant, _ZERO), map(self.totals.__getitem__, names)), names,
                        strict=True))
        heapify(heap)
        while heap:
            yield heappop(heap)[1]

    def largest_first(self, count: int | None = None) -> list[str]:
        """The domains by most left in the dominant resource, then name; the first ``count`` only, if given."""
        totals, dominant = self.totals, self.dominant
        if count is not None:
            return nsmallest(count, self.names, key=lambda name: (-totals[name].get(dominant, _ZERO), name))
        return sorted(self.names, key=lambda name: (-totals[name].get(dominant, _ZERO), name))

    def capacity_text(self, name: str) -> str:
        amounts = ", ".join(amount_text(self.totals[name].get(r, _ZERO), r) for r in sorted(self.demand))
        return f"{len(self.names[name])} node(s) with {amounts}"


def within(members: Sequence[Member], nodes: Iterable[str]) -> list[Member]:
    """The members with only ``nodes`` allowed (members mostly share one node set: each is cut once)."""
    names = frozenset(nodes)
    cut: dict[int, frozenset[str]] = {}
    result = []
    for member in members:
        allowed = cut.get(id(member.nodes))
        if allowed is None:
            allowed = cut[id(member.nodes)] = member.nodes & names
        result.append(member if allowed == member.nodes or isinstance(member, Unplaceable)
                      else replace(member, nodes=allowed))
    return result


def _demand(members: Sequence[Member]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    memo: dict[int, tuple[Mapping[str, Decimal], dict[str, Decimal]]] = {}
    for member in members:
        for resource, value in member_requests(member, memo).items():
            total[resource] = total.get(resource, Decimal(0)) + value
    return total


def _slots(nodes: Sequence[NodeFree], requests: tuple[tuple[str, Decimal], ...], enough: int) -> int:
    """How many members of ``requests`` the nodes could take, each node alone (counting stops at ``enough``)."""
    total = 0
    for node in nodes:
        free = node.free
        total += min(int(free.get(r, _ZERO) // q) for r, q in requests)
        if total >= enough:
            break
    return total


def _free(nodes: Sequence[NodeFree], resource: str) -> Decimal:
    return sum((node.free.get(resource, _ZERO) for node in nodes), _ZERO)


def _widened(members: Sequence[Member], domains: _Domains, solve: Solve) -> TopologyPlan:
    """A preferred gang that fits in no single domain: the fewest of the largest domains whose sums hold it (from
    running totals), widened a few times, then ``fallback``."""
    largest = domains.largest_first()
    running = dict.fromkeys(domains.demand, Decimal(0))
    tried = 0
    for count, name in enumerate(largest, start=1):
        for resource in running:
            running[resource] += domains.totals[name].get(resource, _ZERO)
        if count < 2 or any(running[r] < value for r, value in domains.demand.items()):
            continue
        chosen = largest[:count]
        found = solve(members, [node for domain in chosen for node in domains.nodes(domain)])
        if found.fits:
            return TopologyPlan(found, tuple(sorted(chosen)))
        tried += 1
        if tried == _PREFERRED_WIDENINGS:
            break
    return TopologyPlan(PlanResult(None, 0, ""), fallback=True)


def _no_domain(members: Sequence[Member], topology: Topology) -> str:
    return f"no {topology.key} domain has a node for each of the {len(members)} members"
