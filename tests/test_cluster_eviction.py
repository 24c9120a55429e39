"""The pods/eviction subresource as the apiserver serves it (Kubernetes docs: API-initiated Eviction, Disruptions;
``kubectl drain`` finds it through discovery). In process: the emulated apiserver of an unstarted LocalCluster,
budgets' status computed by running the disruption controller's pass, pods bound and made Ready by the test."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cluster.admission import Request, _admission_request
from cluster.audit import request_info
from cluster.local import ADMIN
from cluster.rbac import allowed
from tests.support.budgets import NS, PDBS, PODS, Budgets

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Budgets:
    return Budgets()


def get(world: Budgets, path: str) -> Any:
    return world.admin.call("GET", path)


def exists(world: Budgets, name: str) -> bool:
    return name in {p["metadata"]["name"] for p in get(world, PODS)["items"]}


def disruption_target(pod: dict[str, Any]) -> tuple[str, str, str]:
    (condition,) = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    return condition["status"], condition["reason"], condition["message"]


SUCCESS = (201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})


def test_a_granted_eviction_uses_one_disruption_and_deletes_the_pod_gracefully(world: Budgets) -> None:
    for name in ("web-0", "web-1"):
        world.pod(name)
    world.budget("web", observed=True, minAvailable=1)
    response = world.evict("web-0")
    assert (response.status, response.body) == SUCCESS
    pod = get(world, f"{PODS}/web-0")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30  # the pod's own grace period
    assert disruption_target(pod) == ("True", "EvictionByEvictionAPI", "Eviction API: evicting")
    status = get(world, f"{PDBS}/web")["status"]
    assert status["disruptionsAllowed"] == 0 and set(status["disruptedPods"]) == {"web-0"}
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("DisruptionAllowed", "False", "InsufficientPods")]


def test_the_eviction_s_delete_options_apply(world: Budgets) -> None:
    world.pod("web-0")
    assert world.evict("web-0", gracePeriodSeconds=5).status == 201
    assert get(world, f"{PODS}/web-0")["metadata"]["deletionGracePeriodSeconds"] == 5


def test_a_budget_that_allows_no_disruption_refuses_with_429(world: Budgets) -> None:
    world.pod("web-0")
    world.budget("web", observed=True, minAvailable=1)
    response = world.evict("web-0")
    assert response.status == 429 and response.body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 429,
        "reason": "TooManyRequests", "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "details": {"causes": [{"reason": "DisruptionBudget",
                                "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}]}}
    assert exists(world, "web-0") and "deletionTimestamp" not in get(world, f"{PODS}/web-0")["metadata"]


def test_a_budget_not_yet_observed_asks_to_retry_in_10_seconds(world: Budgets) -> None:
    world.pod("web-0")
    world.budget("web", minAvailable=0)
    response = world.evict("web-0")
    assert response.status == 429 and response.body is not None
    assert response.body["details"] == {"retryAfterSeconds": 10, "causes": [
        {"reason": "DisruptionBudget", "message": "The disruption budget web is still being processed by the server."}]}


def test_a_negative_budget_is_forbidden(world: Budgets) -> None:
    world.pod("web-0")
    world.budget("web", observed=True, minAvailable=0)
    world.admin.patch(f"{PDBS}/web/status", {"status": {"disruptionsAllowed": -1}})
    response = world.evict("web-0")
    assert response.status == 403 and response.body is not None
    assert response.body["message"] == ('poddisruptionbudget.policy "web" is forbidden: pdb disruptions allowed is '
                                        "negative")


def test_more_than_one_budget_is_an_error(world: Budgets) -> None:
    world.pod("web-0")
    world.budget("one", observed=True, minAvailable=0)
    world.budget("two", observed=True, minAvailable=0)
    response = world.evict("web-0")
    assert (response.status, response.body) == (500, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 500,
        "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."})
    assert exists(world, "web-0")


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed"])
def test_a_pod_that_is_not_running_is_deleted_without_looking_at_budgets(world: Budgets, phase: str) -> None:
    world.pod("web-0", phase=phase, finalizers=["example.com/hold"])
    world.budget("one", observed=True, minAvailable=5)
    world.budget("two", observed=True, minAvailable=5)  # two budgets would even be an error
    assert world.evict("web-0").status == 201
    pod = get(world, f"{PODS}/web-0")
    assert pod["metadata"]["deletionTimestamp"] and disruption_target(pod)[1] == "EvictionByEvictionAPI"
    assert "disruptedPods" not in get(world, f"{PDBS}/one")["status"]


def test_an_unready_pod_goes_without_using_a_budget_that_is_met(world: Budgets) -> None:
    for name in ("web-0", "web-1"):
        world.pod(name)
    world.pod("web-2", ready=False)
    world.budget("web", observed=True, minAvailable=2)  # 2 healthy, 2 desired: met, and nothing to spare
    assert world.evict("web-2").status == 201 and get(world, f"{PODS}/web-2")["metadata"]["deletionTimestamp"]
    assert get(world, f"{PDBS}/web")["status"].get("disruptedPods") is None
    assert world.evict("web-1").status == 429


def test_an_unready_pod_of_an_unmet_budget_needs_a_disruption_unless_always_allowed(world: Budgets) -> None:
    world.pod("web-0", ready=False)
    world.budget("web", observed=True, minAvailable=1)  # 0 healthy of 1 desired
    assert world.evict("web-0").status == 429
    world.admin.patch(f"{PDBS}/web", {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}})
    world.controller.reconcile()
    assert world.evict("web-0").status == 201


def test_a_dry_run_checks_and_changes_nothing(world: Budgets) -> None:
    world.pod("web-0")
    world.budget("web", observed=True, minAvailable=0)
    assert world.evict("web-0", query="?dryRun=All").status == 201
    assert world.evict("web-0", dryRun=["All"]).status == 201
    assert "deletionTimestamp" not in get(world, f"{PODS}/web-0")["metadata"]
    status = get(world, f"{PDBS}/web")["status"]
    assert status["disruptionsAllowed"] == 1 and "disruptedPods" not in status


def test_the_eviction_must_name_the_pod(world: Budgets) -> None:
    world.pod("web-0")
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1"}}
    response = world.cluster.api.handle("POST", f"{PODS}/web-0/eviction", {}, json.dumps(body).encode(), ADMIN)
    assert (response.status, response.body and response.body["message"]) == (
        400, "name in URL does not match name in Eviction object")
    missing = world.evict("nobody")
    assert (missing.status, missing.body and missing.body["message"]) == (404, 'pods "nobody" not found')


def test_discovery_rbac_and_admission_know_the_subresource(world: Budgets) -> None:
    """kubectl drain looks for pods/eviction (kind Eviction, with its group and version) in /api/v1; RBAC grants
    it as ``pods/eviction`` with verb create; webhooks review a policy/v1 Eviction."""
    (entry,) = [r for r in get(world, "/api/v1")["resources"] if r["name"] == "pods/eviction"]
    assert (entry["group"], entry["version"], entry["kind"], entry["verbs"]) == ("policy", "v1", "Eviction",
                                                                                ["create"])
    info = request_info("POST", f"{PODS}/web-0/eviction")
    assert (info.verb, info.resource, info.subresource) == ("create", "pods", "eviction")
    assert allowed([{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}], info)
    assert not allowed([{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]}], info)
    pods = world.cluster.registry.get("", "v1", "pods")
    assert pods is not None
    review = _admission_request(Request("CREATE", pods, "eviction", NS, "web-0", {}, None, ADMIN, False))
    assert (review["kind"], review["resource"], review["subResource"]) == (
        {"group": "policy", "version": "v1", "kind": "Eviction"}, {"group": "", "version": "v1", "resource": "pods"},
        "eviction")
