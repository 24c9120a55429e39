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


# --- the Priority admission plugin ------------------------------------------------------------------------------

PODS = "/api/v1/namespaces/default/pods"


def pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    meta = {"generateName": name} if name.endswith("-") else {"name": name}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def test_a_pod_gets_the_value_and_preemption_policy_of_its_class(admin: Client) -> None:
    admin.create(CLASSES, priority_class("batch", 100, preemptionPolicy="Never"))
    spec = admin.create(PODS, pod(priorityClassName="batch"))["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == ("batch", 100, "Never")
    spec = admin.create(PODS, pod("critical", priorityClassName="system-node-critical"))["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (2000001000, "PreemptLowerPriority")


def test_a_pod_without_a_class_gets_the_global_default_else_zero(admin: Client) -> None:
    spec = admin.create(PODS, pod("before"))["spec"]
    assert ("priorityClassName" in spec, spec["priority"], spec["preemptionPolicy"]) == (
        False, 0, "PreemptLowerPriority")
    admin.create(CLASSES, priority_class("standard", 10, globalDefault=True, preemptionPolicy="Never"))
    spec = admin.create(PODS, pod("after"))["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == ("standard", 10, "Never")


def test_an_unknown_class_is_forbidden_naming_the_pod_or_its_generate_name(admin: Client) -> None:
    error = refusal(lambda: admin.create(PODS, pod(priorityClassName="gold")))
    assert (error.code, error.message) == (403, 'pods "p" is forbidden: no PriorityClass with name gold was found')
    error = refusal(lambda: admin.create(PODS, pod("worker-", priorityClassName="gold")))
    assert error.message == 'pods "worker-" is forbidden: no PriorityClass with name gold was found'


def test_a_priority_or_policy_other_than_the_class_s_is_forbidden(admin: Client) -> None:
    admin.create(CLASSES, priority_class("batch", 100))
    assert admin.create(PODS, pod("same", priorityClassName="batch", priority=100))["spec"]["priority"] == 100
    error = refusal(lambda: admin.create(PODS, pod(priorityClassName="batch", priority=7)))
    assert (error.code, error.message) == (403, 'pods "p" is forbidden: the integer value of priority (7) must not be '
                                                "provided in pod spec; priority admission controller computed 100 from "
                                                "the given PriorityClass name")
    error = refusal(lambda: admin.create(PODS, pod(priority=7)))  # no class: computed 0
    assert "priority admission controller computed 0" in error.message
    error = refusal(lambda: admin.create(PODS, pod(priorityClassName="batch", preemptionPolicy="Never")))
    assert error.message == ('pods "p" is forbidden: the string value of PreemptionPolicy (Never) must not be provided '
                             "in pod spec; priority admission controller computed PreemptLowerPriority from the given "
                             "PriorityClass name")


def test_an_update_that_omits_the_priority_keeps_it(admin: Client) -> None:
    admin.create(CLASSES, priority_class("batch", 100))
    stored = admin.create(PODS, pod(priorityClassName="batch"))
    for key in ("priority", "preemptionPolicy"):
        del stored["spec"][key]
    stored["metadata"]["labels"] = {"updated": "yes"}
    spec = admin.call("PUT", f"{PODS}/p", stored)["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (100, "PreemptLowerPriority")


def test_only_one_class_may_be_the_global_default(admin: Client) -> None:
    admin.create(CLASSES, priority_class("first", 10, globalDefault=True))
    error = refusal(lambda: admin.create(CLASSES, priority_class("second", 20, globalDefault=True)))
    assert (error.code, error.message) == (403, 'priorityclasses.scheduling.k8s.io "second" is forbidden: '
                                                "PriorityClass first is already marked as default. Only one default "
                                                "can exist")
    admin.create(CLASSES, priority_class("second", 20))
    error = refusal(lambda: admin.patch(f"{CLASSES}/second", {"globalDefault": True}))
    assert error.code == 403
    assert admin.patch(f"{CLASSES}/first", {"description": "still the default"})["globalDefault"] is True


def test_the_plugin_resolves_the_priority_before_the_mutating_webhooks_see_the_pod(
        admin: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Priority is a built-in plugin, ordered before MutatingAdmissionWebhook: a webhook sees the resolved pod."""
    seen: list[dict[str, Any]] = []
    webhooks = admin.api.admission

    def mutate(request: Any) -> Any:
        if request.obj is not None and request.resource.plural == "pods":
            seen.append(request.obj["spec"])
        return type(webhooks).mutate(webhooks, request)

    monkeypatch.setattr(webhooks, "mutate", mutate)
    admin.create(PODS, pod(priorityClassName="system-cluster-critical"))
    assert [(s["priority"], s["preemptionPolicy"]) for s in seen] == [(2000000000, "PreemptLowerPriority")]
