"""kube-scheduler's DefaultPreemption PostFilter plugin, deciding only (the scheduler, ``cluster/scheduler.py``, acts):
``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go`` and
``pkg/scheduler/framework/preemption/preemption.go``, default arguments (at least 10% of the nodes and at least 100
are tried as candidates), over the filters of ``cluster.scheduling``.

For a pod that fits no node:

1. ``PodEligibleToPreemptOthers``: not with ``preemptionPolicy: Never``; not while the node it is already nominated to
   (unless that node now fails an unresolvable filter) holds a lower-priority pod being deleted by preemption (its
   ``DisruptionTarget`` condition says ``PreemptionByScheduler``): its earlier victims are still terminating.
2. Candidates: the nodes whose filter failure removing pods could clear (``cluster.scheduling.resolvable``), in node
   order. On each (``SelectVictimsOnNode``): every pod of strictly lower priority is removed; if the pod still does
   not fit (nominated pods of at least its priority included), the node is no candidate; else the removed pods are
   given back one by one, most important first (priority, then earlier start), those whose eviction would violate
   a PodDisruptionBudget (``filterPodsWithPDBViolation``: over budgets' ``disruptionsAllowed``, pods already in
   ``disruptedPods`` not counted, a budget with an empty selector matching nothing) before the others; whoever no
   longer fits stays a victim.
3. One candidate (``pickOneNodeForPreemption``): fewest budget violations, then the lowest highest-victim
   priority, the smallest sum of victim priorities, the fewest victims, the latest start time of the highest-priority
   victims, then the first (upstream: the first of a map, in random order; here: non-violating candidates first,
   each group in node order).

The outcome's ``message`` is the PostFilter status message the FailedScheduling event appends ("preemption: ...");
``clear`` says the pod's ``nominatedNodeName`` is to be cleared (no node would do, even by preemption).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from cluster.pdb import selects
from cluster.scheduling import (
    Obj,
    filter_node,
    nominated_node,
    nominated_pods_for,
    pods_by_node,
    priority,
    resolvable,
    unschedulable_message,
)
from cluster.store import parse_time

MIN_CANDIDATE_NODES_PERCENTAGE, MIN_CANDIDATE_NODES_ABSOLUTE = 10, 100
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
PREEMPTED_BY_SCHEDULER = "PreemptionByScheduler"


@dataclass(frozen=True)
class Candidate:
    node: str
    victims: tuple[Obj, ...]  # most important first
    pdb_violations: int


@dataclass(frozen=True)
class Outcome:
    candidate: Candidate | None
    message: str = ""  # the PostFilter status message ("" on success)
    clear: bool = False  # clear the preemptor's nominatedNodeName


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def start_time(pod: Obj) -> float:
    """``GetPodStartTime``: status.startTime, or now for a pod not started yet."""
    text = (pod.get("status") or {}).get("startTime")
    try:
        return parse_time(text).timestamp() if text else datetime.datetime.now(datetime.UTC).timestamp()
    except ValueError:
        return datetime.datetime.now(datetime.UTC).timestamp()


def more_important_first(pods: Sequence[Obj]) -> list[Obj]:
    """``MoreImportantPod`` order: higher priority, then the earlier started."""
    return sorted(pods, key=lambda p: (-priority(p), start_time(p)))


def terminating_by_preemption(pod: Obj) -> bool:
    """``podTerminatingByPreemption``: being deleted, its DisruptionTarget condition the scheduler's."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    condition = next((c for c in (pod.get("status") or {}).get("conditions") or []
                      if c.get("type") == "DisruptionTarget"), None)
    return condition is not None and condition.get("status") == "True" and condition.get("reason") == \
        PREEMPTED_BY_SCHEDULER


def not_eligible(pod: Obj, reasons: dict[str, str], pods_on_nodes: dict[str, list[Obj]]) -> str:
    """``PodEligibleToPreemptOthers``: why the pod may not preempt now, "" when it may."""
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return "not eligible due to preemptionPolicy=Never."
    node = nominated_node(pod)
    if node in reasons and resolvable(reasons[node]) and any(
            priority(p) < priority(pod) and terminating_by_preemption(p) for p in pods_on_nodes.get(node, [])):
        return "not eligible due to a terminating pod on the nominated node."
    return ""


def split_by_budget_violation(pods: Sequence[Obj], pdbs: Sequence[Obj]) -> tuple[list[Obj], list[Obj]]:
    """``filterPodsWithPDBViolation``, keeping the order: (violating, non-violating)."""
    allowed = [int((pdb.get("status") or {}).get("disruptionsAllowed") or 0) for pdb in pdbs]
    violating: list[Obj] = []
    non_violating: list[Obj] = []
    for pod in pods:
        violated = False
        if (pod.get("metadata") or {}).get("labels"):
            for index, pdb in enumerate(pdbs):
                if not selects(pdb, pod, empty_matches=False) or _name(pod) in ((pdb.get("status") or {}).get(
                        "disruptedPods") or {}):
                    continue
                allowed[index] -= 1
                violated = violated or allowed[index] < 0
        (violating if violated else non_violating).append(pod)
    return violating, non_violating


def victims_on_node(pod: Obj, node: Obj, on_node: Sequence[Obj], nominated: Sequence[Obj],
                    pdbs: Sequence[Obj]) -> Candidate | str:
    """``SelectVictimsOnNode``: the fewest, least important pods to remove for ``pod`` to fit, or why none do."""
    lower = [p for p in on_node if priority(p) < priority(pod)]
    if not lower:
        return NO_VICTIMS
    kept = [p for p in on_node if priority(p) >= priority(pod)]
    reason = filter_node(pod, node, kept + list(nominated))
    if reason:
        return reason
    violating, non_violating = split_by_budget_violation(more_important_first(lower), pdbs)
    victims, violations = [], 0
    for group, counted in ((violating, True), (non_violating, False)):
        for candidate in group:
            if filter_node(pod, node, [*kept, candidate, *nominated]):
                victims.append(candidate)
                violations += counted
            else:
                kept.append(candidate)
    return Candidate(_name(node), tuple(more_important_first(victims)), violations)


def pick_one(candidates: Sequence[Candidate]) -> Candidate:
    """``pickOneNodeForPreemption``: each score in turn keeps the best; the first of those left."""
    scores = (lambda c: -c.pdb_violations, lambda c: -priority(c.victims[0]),
              lambda c: -sum(priority(v) + 2**31 for v in c.victims), lambda c: -len(c.victims),
              lambda c: min(start_time(v) for v in c.victims if priority(v) == priority(c.victims[0])))
    left = list(candidates)
    for score in scores:
        best = max(score(c) for c in left)
        left = [c for c in left if score(c) == best]
        if len(left) == 1:
            break
    return left[0]


def preempt(pod: Obj, nodes: Sequence[Obj], pods: Sequence[Obj], reasons: dict[str, str], pdbs: Sequence[Obj],
            nominated: Sequence[Obj] = ()) -> Outcome:
    """``Evaluator.Preempt`` for a pod that failed the filters of every node (``reasons``, by node name)."""
    on_nodes = pods_by_node(pods)
    why = not_eligible(pod, reasons, on_nodes)
    if why:
        return Outcome(None, f"preemption: {why}")
    potential = [n for n in nodes if _name(n) in reasons and resolvable(reasons[_name(n)])]
    wanted = min(max(len(potential) * MIN_CANDIDATE_NODES_PERCENTAGE // 100, MIN_CANDIDATE_NODES_ABSOLUTE),
                 len(potential))
    ahead = nominated_pods_for(pod, nominated)
    found: dict[bool, list[Candidate]] = {False: [], True: []}  # by whether they violate a budget
    statuses: dict[str, str] = {}
    for node in potential:
        result = victims_on_node(pod, node, on_nodes.get(_name(node), []), ahead.get(_name(node), []), pdbs)
        if isinstance(result, str):
            statuses[_name(node)] = result
            continue
        found[result.pdb_violations > 0].append(result)
        if found[False] and len(found[False]) + len(found[True]) >= wanted:
            break
    candidates = found[False] + found[True]
    if not candidates:
        statuses.update({_name(n): NOT_HELPFUL for n in nodes if _name(n) not in statuses})
        return Outcome(None, f"preemption: {unschedulable_message(statuses, len(nodes))}", clear=True)
    return Outcome(pick_one(candidates))
