"""``kubenexus explain`` on pods read from a cluster after admission, and with objects missing from its input.

The documented flow (docs/tasks/explain-simulate.md) is ``kubectl get pod POD -o yaml`` then ``explain``: that pod
carries admission's labels, annotations and gate (and, once released, the controller's planned node, its node and
status). Explain must say what that state is and decide again for the pod as its creator sent it, giving the same
answer as for the pod before admission; and an object the decision looked for and did not find is named, not
silently decided upon.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gang import keys
from kubenexus.explain import explain
from workloads import records

pytestmark = pytest.mark.unit

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
EXAMPLES = [(name, example) for name, record in records().items() for example in record.examples]


def _load(kind: str, file: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((WORKLOADS / kind / "examples" / file).read_text()) if d]


def _live(pod: dict[str, Any], node: str | None = None) -> dict[str, Any]:
    """``pod`` as ``kubectl get -o yaml`` shows it after creation; released onto and bound to ``node`` if given."""
    live = copy.deepcopy(pod)
    live["metadata"].update(uid="0f0e0d0c-0000-4000-8000-000000000009", creationTimestamp="2026-11-26T03:00:00Z")
    live["status"] = {"phase": "Pending"}
    if node:
        live["metadata"].setdefault("annotations", {})[keys.PLANNED_NODE_ANNOTATION] = node
        live["spec"].pop("schedulingGates", None)
        live["spec"]["nodeName"] = node
        live["status"] = {"phase": "Running"}
    return live


@pytest.mark.parametrize("kind, example", EXAMPLES, ids=[example.pod for _, example in EXAMPLES])
def test_an_admitted_pod_is_recognised_and_decided_as_its_creator_sent_it(kind: str, example: Any) -> None:
    [pod], objects = _load(kind, example.pod), _load(kind, example.objects)
    fresh = explain(pod, objects, None)
    assert fresh["admitted"] is None and fresh["missing"] == []
    for node in (None, "node-7"):
        again = explain(_live(fresh["pod"], node), objects, None)
        answer = ("action", "allowed", "reasons", "warnings")
        assert {k: again[k] for k in answer} == {k: fresh[k] for k in answer}, node
        for field in ("labels", "annotations"):  # what admission writes on the pod now is what it wrote then
            assert again["pod"]["metadata"].get(field) == fresh["pod"]["metadata"].get(field), (node, field)
        if example.action != "gang":
            assert again["admitted"] is None or again["admitted"]["gang"] is None
            continue
        state = again["admitted"]
        assert (state["gang"], state["gated"], state["node"]) == (example.group, node is None, node)
        assert state["size"] == fresh["pod"]["metadata"]["labels"][keys.POD_GROUP_MIN_LABEL]
        assert state["state"].startswith("gated" if node is None else f"released onto node {node}")


def test_the_other_members_given_are_counted() -> None:
    [pod], objects = _load("training", "pytorch-worker.yaml"), _load("training", "pytorch-objects.yaml")
    admitted = explain(pod, objects, None)["pod"]
    others = []
    for index in (1, 2):
        other = copy.deepcopy(admitted)
        other["metadata"]["name"] = admitted["metadata"]["name"][:-1] + str(index)
        others.append(other)
    state = explain(_live(admitted), objects + others, None)["admitted"]
    assert state["members_given"] == 3


def test_a_missing_namespace_is_named_not_silently_decided_upon(capsys: pytest.CaptureFixture[str]) -> None:
    """pytorch-objects.yaml opts in through its Namespace's label: without the Namespace, the verdict changes, and
    the output says which object it was decided without."""
    [pod], objects = _load("training", "pytorch-worker.yaml"), _load("training", "pytorch-objects.yaml")
    [namespace] = [o for o in objects if o["kind"] == "Namespace"]
    without = explain(pod, [o for o in objects if o["kind"] != "Namespace"], None)
    assert explain(pod, objects, None)["action"] == "gang" != without["action"]
    assert without["missing"] == [f"Namespace {namespace['metadata']['name']}"]
    from kubenexus.explain import _print_text

    _print_text(without, False)
    assert capsys.readouterr().out.splitlines()[0].startswith(
        f"missing from the objects given: Namespace {namespace['metadata']['name']}: decided as if they did not exist")
