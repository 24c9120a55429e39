"""Why a gang has no plan, as sentences with numbers: the first bound that breaks, in the users' units.

The planner (``controller/planner.py``) calls these when it has no plan, and the engine words what its room indexes
found with the same sentences, so that a reason reads the same whichever way it was found.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from decimal import Decimal

from controller.capacity import PODS
from controller.predicates import (
    ANY_HOST_IP,
    FILTERS,
    TAINT_UNSCHEDULABLE,
    Filter,
    NodeAffinity,
    NodeInfo,
    NodeReadiness,
    NodeResourcesFit,
    NodeUnschedulable,
    PodInfo,
    TaintToleration,
    is_gang_member_port,
    requirement_text,
    taint_text,
    untolerated,
)
from controller.problem import Clique, MemberClass, Packing, Port, Problem, port_clique
from gang.quantity import format_quantity


def port_name(port: Port) -> str:
    """A host port as reasons print it (a gang's one-member-per-node pseudo port as what it stands for)."""
    ip, number, protocol = port
    if is_gang_member_port(port):  # one member per node (pod anti-affinity), see predicates.gang_member_port
        return f"one-member-per-node slot of {ip if ip != ANY_HOST_IP else 'every member'} ({protocol})"
    return f"{number}/{protocol}" if ip == ANY_HOST_IP else f"{ip}:{number}/{protocol}"


def _port_text(port: Port) -> str:
    if is_gang_member_port(port):
        return "a node without other members of its gang (pod anti-affinity)"
    return f"host port {port_name(port)}"


def amount_text(value: Decimal, resource: str) -> str:
    """An amount of a resource in its canonical units (pod slots counted as such)."""
    if resource == PODS:
        return f"{format_quantity(value, resource)} pod slot" + ("" if value == 1 else "s")
    return f"{format_quantity(value, resource)} {resource}"


def _needs(problem: Problem, cls: MemberClass, short: Container[int] = ()) -> str:
    return needs_text(cls.requests, {problem.resources[r] for r in range(len(problem.resources)) if r in short},
                      cls.ports)


def needs_text(requests: Mapping[str, Decimal], short: Container[str] = (), ports: Iterable[Port] = ()) -> str:
    """What one member needs, as the reasons print it (its one pod slot only when that is what falls short)."""
    parts = [amount_text(value, resource) for resource, value in sorted(requests.items())
             if value and (resource != PODS or value != 1 or resource in short)]
    parts += dict.fromkeys(_port_text(port) for port in sorted(ports))
    return ", ".join(parts) or "nothing"


def too_big_text(name: str, requests: Mapping[str, Decimal], eligible: int, most: Mapping[str, Decimal],
                 word: str, ports: Iterable[Port] = ()) -> str:
    """Why no eligible node can hold one member, given the most of each requested resource any of them has."""
    short = sorted(r for r, q in requests.items() if q > most.get(r, 0))
    head = f"member {name} needs {needs_text(requests, short, ports)}; none of its {eligible} eligible nodes"
    if short:
        most_text = ", ".join(amount_text(Decimal(most.get(r, 0)), r) for r in short)
        return f"{head} can hold it (the most {word} is {most_text})"
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


def no_plan_reason(problem: Problem, pack: Packing, word: str) -> str | None:
    """Why no plan can exist given ``pack``'s capacity, or None when every bound holds."""
    for cls in problem.classes:
        if not cls.eligible:
            if cls.pinned is not None:
                return f"member {cls.names[0]} is bound to node {cls.pinned}, which is not available"
            if cls.no_node:
                return f"member {cls.names[0]} can run on no node: {cls.no_node}"
            return f"member {cls.names[0]} matches none of the {problem.all_nodes} nodes"
    for c, cls in enumerate(problem.classes):
        if not pack.slots[c]:
            return _too_big(problem, pack, cls, word)
    clique = port_clique(problem, pack)
    if clique is not None:
        return _clique_text(clique)
    for c, cls in enumerate(problem.classes):
        if pack.slots[c] < cls.count:
            requests = {problem.resources[r]: units for r, units in cls.need}
            frees = ({problem.resources[r]: pack.free[n][r] for r, _ in cls.need} for n in cls.eligible)
            return slots_text(cls.count, cls.names[0], cls.requests, len(cls.eligible), pack.slots[c], cls.ports,
                              limiting(requests, frees, pack.slots[c]), word)
    for r, resource in enumerate(problem.resources):
        if pack.demand[r] > pack.usable_free[r]:
            return (f"the gang needs {amount_text(problem.value(r, pack.demand[r]), resource)} on nodes matching "
                    f"its constraints; they have {amount_text(problem.value(r, pack.usable_free[r]), resource)} {word}")
    if pack.left > pack.total_cap:
        usable = sum(1 for fitting in pack.fitting if fitting)
        return (f"the {usable} nodes matching the gang's constraints have room for at most {pack.total_cap} of its "
                f"{pack.left} members")
    return None


def _too_big(problem: Problem, pack: Packing, cls: MemberClass, word: str) -> str:
    best = {r: max(pack.free[n][r] for n in cls.eligible) for r, _ in cls.need}
    roomy = [n for n in cls.eligible if all(pack.free[n][r] >= q for r, q in cls.need)]
    if roomy:
        return (f"member {cls.names[0]} needs {_needs(problem, cls)}; none of its {len(cls.eligible)} eligible "
                f"nodes has its host ports free ({len(roomy)} have room but the ports are in use)")
    most = {problem.resources[r]: problem.value(r, value) for r, value in best.items()}
    return too_big_text(cls.names[0], cls.requests, len(cls.eligible), most, word, cls.ports)


def _clique_text(clique: Clique) -> str:
    if is_gang_member_port(clique.port):
        return (f"{clique.size} members must run on separate nodes (required pod anti-affinity), but only "
                f"{clique.room} of their eligible nodes have no other member of their gang")
    return (f"{clique.size} members use host port {port_name(clique.port)}, but only {clique.room} of their eligible "
            f"nodes have it free")


def fragmented_reason(problem: Problem, root: Packing, word: str) -> str:
    """Every bound holds but no plan exists (the search proved it): the tightest resource, fragmented."""
    usable = sum(1 for fitting in root.fitting if fitting)
    tightest = max(range(len(problem.resources)), default=None,
                   key=lambda r: root.demand[r] / root.usable_free[r] if root.usable_free[r] else math.inf)
    if tightest is None:
        return f"no placement of all {problem.members} members exists on the {usable} nodes matching its constraints"
    resource = problem.resources[tightest]
    have = amount_text(problem.value(tightest, root.usable_free[tightest]), resource)
    need = amount_text(problem.value(tightest, root.demand[tightest]), resource)
    return (f"no placement of all {problem.members} members exists on the {usable} nodes matching the gang's "
            f"constraints: they have {have} {word} for {need} needed, but fragmented")




# --- no node at all: what every node fails ---------------------------------------------------------------------

# Nodes as the filters see them, each with how many nodes share its look (one entry per node kind).
Looks = Sequence[tuple[NodeInfo, int]]


def no_node_text(pod: PodInfo, nodes: Looks) -> str:
    """Why no node passes the pod's filters, naming what is missing: each filter that alone rules out every node
    ("no node has nvidia.com/gpu", "every node is tainted k=v:NoSchedule, which the pod does not tolerate", "no node
    matches the node selector zone=x"); when none does, how many nodes fail which filter first (the scheduler's
    attribution), in the same words."""
    total = sum(count for _, count in nodes)
    if not total:
        return "the cluster has no nodes"
    everywhere = [_everywhere(check, pod, nodes) for check in FILTERS
                  if all(check.filter(pod, node) is not None for node, _ in nodes)]
    if everywhere:
        return "; ".join(everywhere)
    why: Counter[str] = Counter()
    for node, count in nodes:
        check = next(c for c in FILTERS if c.filter(pod, node) is not None)
        why[_node_text(check, pod, node)] += count
    parts = [f"{count} {'is' if count == 1 else 'are'} {text}" for text, count in
             sorted(why.items(), key=lambda item: (-item[1], item[0]))]
    return f"none of the {total} nodes passes its filters: {', '.join(parts)}"


def _everywhere(check: Filter, pod: PodInfo, nodes: Looks) -> str:
    """What ``check``, failed by every node, says about the cluster as a whole."""
    infos = [node for node, _ in nodes]
    if isinstance(check, NodeUnschedulable):
        return f"every node is cordoned (unschedulable), and the pod does not tolerate {TAINT_UNSCHEDULABLE}"
    if isinstance(check, NodeReadiness):
        return "no node is ready"
    if isinstance(check, TaintToleration):
        common = [t for t in untolerated(pod.tolerations, infos[0].taints)
                  if all(t in untolerated(pod.tolerations, node.taints) for node in infos[1:])]
        if common:
            return (f"every node is tainted {' and '.join(taint_text(t) for t in common)}, which the pod does not "
                    "tolerate")
        first: Counter[str] = Counter()
        for node, count in nodes:
            first[taint_text(untolerated(pod.tolerations, node.taints)[0])] += count
        listed = ", ".join(f"{taint} on {count}" for taint, count in sorted(first.items(), key=lambda i: (-i[1], i[0])))
        return f"every node has a taint the pod does not tolerate ({listed})"
    if isinstance(check, NodeAffinity):
        return _affinity_everywhere(pod, infos)
    assert isinstance(check, NodeResourcesFit)
    wanted = sorted(name for name, value in pod.requests.items() if value > 0)
    nowhere = [r for r in wanted if all(node.allocatable.get(r, 0) <= 0 for node in infos)]
    if nowhere:
        return f"no node has {' or '.join(nowhere)}"
    lacking = [r for r in wanted if any(node.allocatable.get(r, 0) <= 0 for node in infos)]
    if len(lacking) > 2:
        return f"no node has all of {', '.join(lacking)}"
    return f"no node has both {' and '.join(lacking)}"


def _affinity_everywhere(pod: PodInfo, nodes: Sequence[NodeInfo]) -> str:
    selector, terms = pod.placement.selector, pod.placement.terms
    pairs = [f"{key}={value}" for key, value in selector]
    unmatched = [f"{key}={value}" for key, value in selector if all(n.labels.get(key) != value for n in nodes)]
    if unmatched:
        return f"no node matches the node selector {', '.join(unmatched)}"
    selected = [n for n in nodes if all(n.labels.get(key) == value for key, value in selector)]
    if not selected:
        return f"no node matches the whole node selector {', '.join(pairs)}"
    # the required node affinity rules out every node the selector leaves
    text = " or ".join(",".join([*(requirement_text(r) for r in t.labels), *(requirement_text(f) for f in t.fields)])
                       if t.valid else "(an invalid term)" for t in terms or ())
    head = (f"no node matches both the node selector {', '.join(pairs)} and its required node affinity {text}"
            if pairs else f"no node matches its required node affinity {text or '(no terms)'}")
    if terms is not None and len(terms) == 1 and terms[0].valid:
        term = terms[0]
        never = [requirement_text(r) for r in term.labels if not any(
            pod.placement.requirement_matches(r, n.labels) for n in selected)]
        if never:
            return f"{head} (no node satisfies {', '.join(never)})"
    return head


def _node_text(check: Filter, pod: PodInfo, node: NodeInfo) -> str:
    """One node failing ``check``, as a predicate for "N are ..."."""
    if isinstance(check, NodeUnschedulable):
        return "cordoned"
    if isinstance(check, NodeReadiness):
        return "not ready"
    if isinstance(check, TaintToleration):
        return f"tainted {taint_text(untolerated(pod.tolerations, node.taints)[0])}"
    if isinstance(check, NodeAffinity):
        wrong = next((f"{k}={v}" for k, v in pod.placement.selector if node.labels.get(k) != v), "")
        return f"without label {wrong}" if wrong else "outside its required node affinity"
    missing = sorted(name for name, value in pod.requests.items() if value > 0 and node.allocatable.get(name, 0) <= 0)
    return f"without {', '.join(missing)}"
