"""PriorityClasses and pod priority as the apiserver serves them (Kubernetes docs: Pod Priority and Preemption;
the API reference of scheduling.k8s.io/v1 PriorityClass). Driven in process through the emulated apiserver's REST
layer (no HTTP, no components): an unstarted LocalCluster has its apiserver and its system classes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cluster import tables
from cluster.controllers import Client
from cluster.local import ADMIN, LocalCluster
from cluster.store import ApiError

pytestmark = pytest.mark.unit

CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.fixture
def admin() -> Iterator[Client]:
    yield Client(LocalCluster().api, ADMIN)


def refusal(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value


def priority_class(name: str, value: int, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **fields}


# --- PriorityClass ----------------------------------------------------------------------------------------------


def test_the_system_classes_are_there_from_the_start(admin: Client) -> None:
    classes = {c["metadata"]["name"]: c for c in admin.call("GET", CLASSES)["items"]}
    assert {name: (c["value"], c["globalDefault"], c["preemptionPolicy"]) for name, c in classes.items()} == {
        "system-cluster-critical": (2000000000, False, "PreemptLowerPriority"),
        "system-node-critical": (2000001000, False, "PreemptLowerPriority")}


def test_system_classes_cannot_be_deleted_user_classes_can(admin: Client) -> None:
    error = refusal(lambda: admin.call("DELETE", f"{CLASSES}/system-node-critical"))
    assert (error.code, error.message) == (403, 'priorityclasses.scheduling.k8s.io "system-node-critical" is '
                                                "forbidden: this is a system priority class and cannot be deleted")
    admin.create(CLASSES, priority_class("batch", 100))
    admin.call("DELETE", f"{CLASSES}/batch")
    assert [c["metadata"]["name"] for c in admin.call("GET", CLASSES)["items"]] == [
        "system-cluster-critical", "system-node-critical"]


def test_a_user_class_may_be_worth_at_most_a_billion(admin: Client) -> None:
    admin.create(CLASSES, priority_class("top", 1_000_000_000))
    admin.create(CLASSES, priority_class("negative", -5))
    error = refusal(lambda: admin.create(CLASSES, priority_class("over", 1_000_000_001)))
    assert (error.code, error.message) == (422, 'PriorityClass.scheduling.k8s.io "over" is invalid: value: Forbidden: '
                                                "maximum allowed value of a user defined priority is 1000000000")


@pytest.mark.parametrize(("name", "value", "fields", "why"), [
    ("system-custom", 10, {}, "system-custom is not a known system priority class"),
    ("system-node-critical", 5, {}, "value of system-node-critical PriorityClass must be 2000001000"),
    ("system-cluster-critical", 2000000000, {"globalDefault": True},
     "globalDefault of system-cluster-critical PriorityClass must be false"),
])
def test_the_system_prefix_is_reserved(admin: Client, name: str, value: int, fields: dict[str, Any], why: str) -> None:
    error = refusal(lambda: admin.create(CLASSES, priority_class(name, value, **fields)))
    assert (error.code, error.message) == (422, f'PriorityClass.scheduling.k8s.io "{name}" is invalid: '
                                                "metadata.name: Forbidden: priority class names with 'system-' prefix "
                                                f"are reserved for system use only. error: {why}")


def test_preemption_policy_defaults_to_preempt_lower_priority_and_takes_two_values(admin: Client) -> None:
    assert admin.create(CLASSES, priority_class("a", 1))["preemptionPolicy"] == "PreemptLowerPriority"
    assert admin.create(CLASSES, priority_class("b", 1, preemptionPolicy="Never"))["preemptionPolicy"] == "Never"
    error = refusal(lambda: admin.create(CLASSES, priority_class("c", 1, preemptionPolicy="Sometimes")))
    assert error.message == ('PriorityClass.scheduling.k8s.io "c" is invalid: preemptionPolicy: Unsupported value: '
                             '"Sometimes": supported values: "PreemptLowerPriority", "Never"')


def test_value_and_preemption_policy_are_immutable(admin: Client) -> None:
    admin.create(CLASSES, priority_class("batch", 100, preemptionPolicy="Never"))
    error = refusal(lambda: admin.patch(f"{CLASSES}/batch", {"value": 200, "preemptionPolicy": "PreemptLowerPriority"}))
    assert (error.code, error.message) == (422, 'PriorityClass.scheduling.k8s.io "batch" is invalid: [value: '
                                                "Forbidden: may not be changed in an update., preemptionPolicy: "
                                                'Invalid value: "PreemptLowerPriority": field is immutable]')
    assert admin.patch(f"{CLASSES}/batch", {"description": "nightly"})["description"] == "nightly"
    # A PUT that omits preemptionPolicy means the default, which changes the field of a Never class...
    error = refusal(lambda: admin.call("PUT", f"{CLASSES}/batch", priority_class("batch", 100)))
    assert error.message.endswith('preemptionPolicy: Invalid value: "PreemptLowerPriority": field is immutable')
    # ...and nothing for a class that has the default.
    admin.create(CLASSES, priority_class("web", 100))
    assert admin.call("PUT", f"{CLASSES}/web", priority_class("web", 100, description="x"))["preemptionPolicy"] == \
        "PreemptLowerPriority"


def test_the_printer() -> None:
    """``printPriorityClass``: NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY, none of them -o wide only."""
    resource = LocalCluster().registry.get("scheduling.k8s.io", "v1", "priorityclasses")
    assert resource is not None and resource.short_names == ("pc",) and not resource.namespaced
    pc = priority_class("batch", 100, globalDefault=True, preemptionPolicy="Never")
    table = tables.table(resource, [pc], "1", "meta.k8s.io/v1", "None")
    assert [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", "string", 0), ("Value", "integer", 0), ("Global-Default", "boolean", 0), ("Age", "string", 0),
        ("PreemptionPolicy", "string", 0)]
    assert table["rows"][0]["cells"] == ["batch", 100, True, "<unknown>", "Never"]
