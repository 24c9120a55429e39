"""Queues (``scheduling.kubenexus.io/v1alpha1`` ``Queue``, cluster-scoped): what a Queue's spec says, and which Queue
a gang belongs to. Pure: the gate controller (``controller/queues.py``), the webhook's warnings and ``kubenexus
doctor`` read Queues through these functions, so that the three never disagree.

A gang's queue is its root's ``kubenexus.io/queue`` annotation, else the one Queue whose ``namespaceSelector``
matches its namespace, else none (the gang is decided as without queues). A named Queue that does not exist, or a
namespace two Queues select, is a ``QueueProblem``: the gang waits and says why (never placed in a guessed queue).
Field names and defaults follow Kueue's ClusterQueue where it has one (flat: no hierarchy, no flavors).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from gang import keys
from gang.quantity import parse_quantity
from gang.resources import Resources
from gang.selectors import selector_matches

GROUP, VERSION, PLURAL, KIND = "scheduling.kubenexus.io", "v1alpha1", "queues", "Queue"
BEST_EFFORT_FIFO, STRICT_FIFO = "BestEffortFIFO", "StrictFIFO"
LOWER_PRIORITY, NEVER, ANY = "LowerPriority", "Never", "Any"


@dataclass(frozen=True)
class QueueSpec:
    """A Queue's spec as the product reads it (defaults applied)."""

    name: str
    selector: Mapping[str, Any] | None = None  # namespaceSelector; None selects no namespace
    cohort: str = ""
    nominal: Resources = field(default_factory=dict)
    borrowing_limit: Resources = field(default_factory=dict)  # per resource; absent: no limit
    weight: Decimal = Decimal(1)
    strategy: str = BEST_EFFORT_FIFO
    within_queue: str = LOWER_PRIORITY
    reclaim: str = ANY  # reclaimWithinCohort; Any by default (meaningful with a cohort)
    generation: int = 0


@dataclass(frozen=True)
class QueueProblem:
    """Why a gang's queue cannot be told: it waits, and this is its reason."""

    reason: str


def _quantities(value: Any) -> Resources:
    out: Resources = {}
    for name, quantity in (value or {}).items() if isinstance(value, Mapping) else ():
        try:
            out[str(name)] = parse_quantity(quantity)
        except (ValueError, InvalidOperation, TypeError):
            continue  # the CRD's schema refuses it at apply time; an object stored before that is read without it
    return out


def parse_queue(obj: Mapping[str, Any]) -> QueueSpec:
    """The spec of a Queue object, with Kueue's defaults for what it leaves out."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    preemption = spec.get("preemption") or {}
    try:
        weight = parse_quantity((spec.get("fairSharing") or {}).get("weight", 1))
    except (ValueError, InvalidOperation, TypeError):
        weight = Decimal(1)
    selector, reclaim = spec.get("namespaceSelector"), preemption.get("reclaimWithinCohort")
    return QueueSpec(
        name=str(meta.get("name") or ""),
        selector=selector if isinstance(selector, Mapping) else None,
        cohort=str(spec.get("cohort") or ""),
        nominal=_quantities(spec.get("nominalQuota")),
        borrowing_limit=_quantities(spec.get("borrowingLimit")),
        weight=weight,
        strategy=STRICT_FIFO if spec.get("queueingStrategy") == STRICT_FIFO else BEST_EFFORT_FIFO,
        within_queue=NEVER if preemption.get("withinQueue") == NEVER else LOWER_PRIORITY,
        reclaim=reclaim if reclaim in (ANY, LOWER_PRIORITY, NEVER) else ANY,
        generation=int(meta.get("generation") or 0),
    )


def selecting(queues: Mapping[str, QueueSpec], labels: Mapping[str, str]) -> list[str]:
    """The Queues whose namespaceSelector matches a namespace with ``labels``, by name."""
    return sorted(name for name, queue in queues.items()
                  if queue.selector is not None and selector_matches(dict(queue.selector), labels))


def queue_of(named: str | None, namespace: str, labels: Mapping[str, str] | None,
             queues: Mapping[str, QueueSpec]) -> str | None | QueueProblem:
    """The gang's queue: ``named`` (its root's ``kubenexus.io/queue``), else the one Queue selecting its namespace
    (whose ``labels`` are None when not known yet), else None."""
    if named:
        if named in queues:
            return named
        return QueueProblem(f"its root names Queue {named!r} ({keys.QUEUE}), which does not exist: create it, or "
                            "correct the annotation")
    if not any(q.selector is not None for q in queues.values()):
        return None
    if labels is None:
        return QueueProblem(f"the labels of its namespace {namespace} are not known yet, and Queues select by them")
    found = selecting(queues, labels)
    if len(found) > 1:
        return QueueProblem(f"namespace {namespace} is selected by {len(found)} Queues ({', '.join(found)}): set "
                            f"{keys.QUEUE} on the root, or make the Queues' namespaceSelectors disjoint")
    return found[0] if found else None
