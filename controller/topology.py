"""Topology-aware gangs: the whole gang inside one domain (nodes sharing one value of a label) when its root asks.

A root annotated ``kubenexus.io/topology-required: <label key>`` is released only with a witness plan inside one
domain of that label; ``kubenexus.io/topology-preferred`` asks for as few domains as possible and falls back to any
placement rather than waiting. Nodes without the label are in no domain. Pure: the planner (``planner.plan``,
``planner.never_fits``) does the packing, this module only chooses which nodes it may use and words the outcome.

Which domain: the tightest that fits, so that big domains stay free for big gangs. Tightness is the free capacity
a domain would have left in the gang's dominant resource (the one it needs most of, as a share of the candidate
domains' free total), summed over the domain's nodes; ties by name. Domains whose sums cannot hold the gang are
skipped without planning; when no domain fits, the few largest are planned, so that the reason names the best
one's shortfall (planning every domain of a big cluster for every waiting gang would cost the pass too much).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from controller.explain import amount_text
from controller.planner import PlanResult, never_fits, plan
from controller.problem import Member, NodeFree, Unplaceable, member_requests
from gang import keys

Solve = Callable[[Sequence[Member], Sequence[NodeFree]], PlanResult]
_PREFERRED_WIDENINGS = 3  # multi-domain attempts of a preferred gang before any placement
_SHORTFALL_DOMAINS = 3  # the largest domains planned to word a required gang's "not yet"


@dataclass(frozen=True)
class Topology:
    """A gang's topology request: the node label whose values are domains, and whether one domain is required."""

    key: str
    required: bool

    @property
    def annotation(self) -> str:
        return keys.TOPOLOGY_REQUIRED if self.required else keys.TOPOLOGY_PREFERRED

    def text(self) -> str:
        return f"{'one' if self.required else 'as few as possible'} {self.key} domain{'' if self.required else 's'}"


def topology_of(annotations: Mapping[str, str]) -> Topology | None:
    """The root's request (admission refuses a root with both; required would win)."""
    for annotation, required in ((keys.TOPOLOGY_REQUIRED, True), (keys.TOPOLOGY_PREFERRED, False)):
        value = annotations.get(annotation)
        if isinstance(value, str) and value:
            return Topology(value, required)
    return None


@dataclass(frozen=True)
class TopologyPlan:
    """A plan (or "not yet") and the domains it uses, in name order; ``fallback``: a preferred gang found no plan
    within a few domains, and its caller should plan it anywhere."""

    result: PlanResult
    domains: tuple[str, ...] = ()
    fallback: bool = False


def domains_of(nodes: Sequence[NodeFree], label: Callable[[str], str | None]) -> dict[str, list[NodeFree]]:
    """The nodes of each domain, by domain name; nodes without the label are in none."""
    found: dict[str, list[NodeFree]] = {}
    for node in nodes:
        value = label(node.name)
        if value is not None:
            found.setdefault(value, []).append(node)
    return found


def plan_in_domains(members: Sequence[Member], nodes: Sequence[NodeFree], label: Callable[[str], str | None],
                    topology: Topology, solve: Solve = plan) -> TopologyPlan:
    """A plan within one domain (the tightest that fits); for a preferred gang, else within the fewest of the
    largest domains tried, else ``fallback``. A required gang's "not yet" names the best domain's shortfall."""
    domains = _candidates(members, domains_of(nodes, label))
    demand = _demand(members)
    order = _tightest_first(domains, demand)
    for name in order:
        if _holds(domains[name], demand):
            found = solve(within(members, _names(domains[name])), domains[name])
            if found.fits:
                return TopologyPlan(found, (name,))
    if not topology.required:
        return _widened(members, domains, demand, solve)
    if not domains:
        return TopologyPlan(PlanResult(None, 0, _no_domain(members, topology)))
    best_name, best = "", PlanResult(None, -1, "")
    dominant = _dominant(domains, demand)
    largest = sorted(domains, key=lambda name: (-_share(domains[name], demand, dominant), name))
    for name in sorted(largest[:_SHORTFALL_DOMAINS], key=order.index):
        found = solve(within(members, _names(domains[name])), domains[name])
        if found.placed_max > best.placed_max:
            best_name, best = name, found
    of = f"the best of the {_SHORTFALL_DOMAINS} largest of {len(domains)}" if len(domains) > _SHORTFALL_DOMAINS else ""
    reason = (f"no {topology.key} domain has room for the whole gang now: {of + ', ' if of else ''}{best_name} has "
              f"room for {best.placed_max} of {len(members)} members ({best.shortfall})")
    return TopologyPlan(PlanResult(None, best.placed_max, reason), (best_name,))


def never_fits_in_domains(members: Sequence[Member], allocatable: Sequence[NodeFree],
                          label: Callable[[str], str | None], topology: Topology) -> str | None:
    """Why no domain could ever hold the gang (naming the largest domain's capacity), or None when one might.
    Only a required topology can make a gang never fit: a preferred one falls back to any placement."""
    if not topology.required:
        return None
    domains = _candidates(members, domains_of(allocatable, label))
    if not domains:
        return _no_domain(members, topology) + ", even with nothing else running"
    reasons = {}
    for name in sorted(domains):
        reason = never_fits(within(members, _names(domains[name])), domains[name])
        if reason is None:
            return None
        reasons[name] = reason
    demand = _demand(members)
    largest = max(domains, key=lambda name: (_share(domains[name], demand, _dominant(domains, demand)), name))
    return (f"no {topology.key} domain could ever hold the gang: the largest of {len(domains)}, {largest}, has "
            f"{_capacity_text(domains[largest], demand)} allocatable ({reasons[largest]})")


def domains_used(placement: Mapping[str, str], label: Callable[[str], str | None]) -> tuple[str, ...]:
    """The domains a plan's nodes are in, by name (nodes without the label are left out)."""
    return tuple(sorted({value for node in set(placement.values()) if (value := label(node)) is not None}))


# --- pieces --------------------------------------------------------------------------------------------------------


def _candidates(members: Sequence[Member], domains: Mapping[str, list[NodeFree]]) -> dict[str, list[NodeFree]]:
    """Domains with a node for every member and holding every pinned member's node."""
    found = {}
    for name, nodes in domains.items():
        names = {node.name for node in nodes}
        if all(m.pinned in names if m.pinned is not None else not m.nodes.isdisjoint(names) for m in members):
            found[name] = nodes
    return found


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


def _names(nodes: Sequence[NodeFree]) -> list[str]:
    return [node.name for node in nodes]


def _demand(members: Sequence[Member]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    memo: dict[int, tuple[Mapping[str, Decimal], dict[str, Decimal]]] = {}
    for member in members:
        for resource, value in member_requests(member, memo).items():
            total[resource] = total.get(resource, Decimal(0)) + value
    return total


def _free(nodes: Sequence[NodeFree], resource: str) -> Decimal:
    return sum((Decimal(node.free.get(resource, 0)) for node in nodes), Decimal(0))


def _holds(nodes: Sequence[NodeFree], demand: Mapping[str, Decimal]) -> bool:
    """The domain's sums hold the gang (necessary, not sufficient)."""
    return all(_free(nodes, resource) >= value for resource, value in demand.items())


def _dominant(domains: Mapping[str, list[NodeFree]], demand: Mapping[str, Decimal]) -> str:
    """The resource the gang needs most of, as a share of the candidate domains' free total; ties by name."""
    def share(resource: str) -> tuple[Decimal, str]:
        total = sum((_free(nodes, resource) for nodes in domains.values()), Decimal(0))
        return (demand[resource] / total if total > 0 else Decimal("Infinity")), resource

    return max(demand, key=share) if demand else ""


def _share(nodes: Sequence[NodeFree], demand: Mapping[str, Decimal], resource: str) -> Decimal:
    return _free(nodes, resource) - demand.get(resource, Decimal(0)) if resource else Decimal(0)


def _tightest_first(domains: Mapping[str, list[NodeFree]], demand: Mapping[str, Decimal]) -> list[str]:
    """Domains by what they would have left in the dominant resource, then by name."""
    dominant = _dominant(domains, demand)
    return sorted(domains, key=lambda name: (_share(domains[name], demand, dominant), name))


def _widened(members: Sequence[Member], domains: Mapping[str, list[NodeFree]], demand: Mapping[str, Decimal],
             solve: Solve) -> TopologyPlan:
    """A preferred gang that fits in no single domain: the fewest of the largest domains whose sums hold it, widened
    a few times, then ``fallback``."""
    dominant = _dominant(domains, demand)
    largest = sorted(domains, key=lambda name: (-_share(domains[name], demand, dominant), name))
    tried = 0
    for count in range(2, len(largest) + 1):
        chosen = [node for name in largest[:count] for node in domains[name]]
        if not _holds(chosen, demand):
            continue
        found = solve(within(members, _names(chosen)), chosen)
        if found.fits:
            return TopologyPlan(found, tuple(sorted(largest[:count])))
        tried += 1
        if tried == _PREFERRED_WIDENINGS:
            break
    return TopologyPlan(PlanResult(None, 0, ""), fallback=True)


def _no_domain(members: Sequence[Member], topology: Topology) -> str:
    return (f"no node labelled {topology.key} admits all {len(members)} members in one domain"
            if members else f"no node is labelled {topology.key}")


def _capacity_text(nodes: Sequence[NodeFree], demand: Mapping[str, Decimal]) -> str:
    amounts = ", ".join(amount_text(_free(nodes, resource), resource) for resource in sorted(demand))
    return f"{len(nodes)} node(s) with {amounts}"
