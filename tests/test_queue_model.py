"""Which Queue a gang belongs to, and what a Queue's spec says (gang/queues.py): the one rule the controller, the
webhook's warnings and doctor share."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gang.queues import STRICT_FIFO, QueueProblem, QueueSpec, parse_queue, queue_of

pytestmark = pytest.mark.unit


def queue(name: str, selector: dict | None = None, **spec: object) -> dict:
    body: dict = dict(spec)
    if selector is not None:
        body["namespaceSelector"] = selector
    return {"apiVersion": "scheduling.kubenexus.io/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": body}


def test_a_spec_with_kueues_defaults() -> None:
    spec = parse_queue(queue("team-a", {"matchLabels": {"team": "a"}}, cohort="research",
                             nominalQuota={"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 4, "pods": "100"},
                             borrowingLimit={"cpu": "8"}))
    assert spec.nominal == {"cpu": Decimal(16), "memory": Decimal(64 * 2**30), "nvidia.com/gpu": Decimal(4),
                            "pods": Decimal(100)}
    assert spec.borrowing_limit == {"cpu": Decimal(8)}
    assert (spec.weight, spec.strategy, spec.within_queue, spec.reclaim) == (
        Decimal(1), "BestEffortFIFO", "LowerPriority", "Any")
    other = parse_queue(queue("b", fairSharing={"weight": "0.5"}, queueingStrategy=STRICT_FIFO,
                              preemption={"withinQueue": "Never", "reclaimWithinCohort": "LowerPriority"}))
    assert (other.weight, other.strategy, other.within_queue, other.reclaim, other.selector) == (
        Decimal("0.5"), STRICT_FIFO, "Never", "LowerPriority", None)


QUEUES = {q.name: q for q in (
    QueueSpec("team-a", {"matchLabels": {"team": "a"}}),
    QueueSpec("team-b", {"matchExpressions": [{"key": "team", "operator": "In", "values": ["b", "ab"]}]}),
    QueueSpec("shared", {"matchLabels": {"team": "ab"}}),
    QueueSpec("named-only"),  # selects no namespace: only roots that name it
)}


@pytest.mark.parametrize("named, labels, expected", [
    (None, {"team": "a"}, "team-a"),
    (None, {"team": "b"}, "team-b"),
    (None, {"team": "c"}, None),  # no Queue selects it: decided as without queues
    ("named-only", {"team": "a"}, "named-only"),  # the annotation wins over the selector
    ("named-only", None, "named-only"),  # and needs no namespace labels
])
def test_the_annotation_then_the_one_selecting_queue(named: str | None, labels: dict | None,
                                                    expected: str | None) -> None:
    assert queue_of(named, "ns", labels, QUEUES) == expected


def test_what_cannot_be_told_is_a_problem_that_names_the_fix() -> None:
    missing = queue_of("team-z", "ns", {"team": "a"}, QUEUES)
    assert isinstance(missing, QueueProblem) and "'team-z'" in missing.reason and "does not exist" in missing.reason
    two = queue_of(None, "ml", {"team": "ab"}, QUEUES)
    assert isinstance(two, QueueProblem)
    assert "selected by 2 Queues (shared, team-b)" in two.reason and "kubenexus.io/queue" in two.reason
    unknown = queue_of(None, "ml", None, QUEUES)
    assert isinstance(unknown, QueueProblem) and "labels of its namespace ml" in unknown.reason
    # without any selecting Queue the namespace's labels do not matter
    assert queue_of(None, "ml", None, {"named-only": QUEUES["named-only"]}) is None
    assert queue_of(None, "ml", None, {}) is None
