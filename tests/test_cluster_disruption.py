"""PodDisruptionBudget status as kube-controller-manager's disruption controller keeps it (Kubernetes docs:
Disruptions, Specifying a Disruption Budget for your Application; the policy/v1 API reference). In process: the
emulated apiserver of an unstarted LocalCluster, the controller's passes run by the test, pods made Ready by the
test standing in for the kubelet."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from cluster import tables
from cluster.disruption import DisruptionError, count_healthy, disrupted_pods, scaled
from cluster.local import LocalCluster
from cluster.pdb import selects, with_disruption_allowed
from cluster.store import now
from tests.support.budgets import APP, NS, PDBS, PODS, Budgets

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Budgets:
    return Budgets()


def counts(status: dict[str, Any]) -> tuple[int, int, int, int]:
    return status["expectedPods"], status["desiredHealthy"], status["currentHealthy"], status["disruptionsAllowed"]


def allowed_condition(status: dict[str, Any]) -> tuple[str, str, int]:
    (condition,) = [c for c in status["conditions"] if c["type"] == "DisruptionAllowed"]
    return condition["status"], condition["reason"], condition["observedGeneration"]


# --- pure parts -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "total", "expected"), [(3, 10, 3), ("50%", 5, 3), ("50%", 4, 2), ("1%", 1, 1),
                                                           ("0%", 7, 0), ("100%", 3, 3)])
def test_scaled_values_round_up(value: Any, total: int, expected: int) -> None:
    assert scaled(value, total) == expected


@pytest.mark.parametrize(("value", "message"), [
    ("5", "invalid value for IntOrString: invalid type: string is not a percentage"),
    ("x%", 'invalid value for IntOrString: invalid value "x%": strconv.Atoi: parsing "x": invalid syntax')])
def test_unscalable_values(value: str, message: str) -> None:
    with pytest.raises(DisruptionError, match=message):
        scaled(value, 4)


def test_selectors_nil_matches_nothing_empty_everything_except_for_preemption() -> None:
    pod = {"metadata": {"namespace": NS, "labels": APP}}
    assert selects({"metadata": {"namespace": NS}, "spec": {"selector": {"matchLabels": APP}}}, pod)
    assert not selects({"metadata": {"namespace": "other"}, "spec": {"selector": {"matchLabels": APP}}}, pod)
    assert not selects({"metadata": {"namespace": NS}, "spec": {}}, pod)
    assert selects({"metadata": {"namespace": NS}, "spec": {"selector": {}}}, pod)
    assert not selects({"metadata": {"namespace": NS}, "spec": {"selector": {}}}, pod, empty_matches=False)
    bad = {"matchExpressions": [{"key": "app", "operator": "Near"}]}
    assert not selects({"metadata": {"namespace": NS}, "spec": {"selector": bad}}, pod)


def test_disrupted_pods_are_awaited_for_two_minutes() -> None:
    clock = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
    pods = [{"metadata": {"name": n}} for n in ("a", "b", "c")] + [
        {"metadata": {"name": "d", "deletionTimestamp": "2026-01-01T12:00:00Z"}}]
    recorded = {"a": "2026-01-01T11:59:00Z", "b": "2026-01-01T11:57:59Z", "d": "2026-01-01T11:59:00Z",
                "gone": "2026-01-01T11:59:00Z"}
    kept, expired = disrupted_pods(pods, recorded, clock)
    assert kept == {"a": "2026-01-01T11:59:00Z"} and [p["metadata"]["name"] for p in expired] == ["b"]
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert count_healthy([{**p, **ready} for p in pods], kept) == 2  # b and c; a is disrupted, d is being deleted


def test_the_disruption_allowed_condition_moves_only_when_its_status_does() -> None:
    first = with_disruption_allowed({"disruptionsAllowed": 1, "observedGeneration": 1})
    (condition,) = first["conditions"]
    assert (condition["status"], condition["reason"], condition["message"]) == ("True", "SufficientPods", "")
    stale = {**first, "conditions": [{**condition, "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
    assert with_disruption_allowed({**stale, "disruptionsAllowed": 2})["conditions"][0]["lastTransitionTime"] == \
        "2020-01-01T00:00:00Z"
    changed = with_disruption_allowed({**stale, "disruptionsAllowed": 0})["conditions"][0]
    assert (changed["status"], changed["reason"]) == ("False", "InsufficientPods")
    assert changed["lastTransitionTime"] != "2020-01-01T00:00:00Z"


# --- the controller ---------------------------------------------------------------------------------------------


def test_min_available_as_an_integer_counts_the_ready_pods_selected(world: Budgets) -> None:
    for name in ("a", "b", "c"):
        world.pod(name)
    world.pod("other", labels={"app": "db"})
    world.budget(minAvailable=2)
    status = world.status()
    assert counts(status) == (3, 2, 3, 1) and status["observedGeneration"] == 1
    assert allowed_condition(status) == ("True", "SufficientPods", 1)
    world.admin.patch(f"{PODS}/a/status", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    status = world.status()
    assert counts(status) == (3, 2, 2, 0) and allowed_condition(status) == ("False", "InsufficientPods", 1)


def test_a_deleting_pod_is_not_healthy_and_a_generation_change_is_observed(world: Budgets) -> None:
    for name in ("a", "b", "c"):
        world.pod(name)
    world.admin.patch(f"{PODS}/c", {"metadata": {"finalizers": ["example.com/hold"]}})
    world.admin.call("DELETE", f"{PODS}/c")
    world.budget(minAvailable=1)
    assert counts(world.status()) == (3, 1, 2, 1)
    world.admin.patch(f"{PDBS}/budget", {"spec": {"minAvailable": 2}})
    status = world.status()
    assert counts(status) == (3, 2, 2, 0) and status["observedGeneration"] == 2
    assert allowed_condition(status) == ("False", "InsufficientPods", 2)


def test_nothing_is_written_when_nothing_changed(world: Budgets) -> None:
    world.pod("a")
    world.budget(minAvailable=0)
    version = world.admin.call("GET", f"{PDBS}/budget")["metadata"]["resourceVersion"]
    world.status()
    written = world.admin.call("GET", f"{PDBS}/budget")["metadata"]["resourceVersion"]
    assert written != version
    world.status()
    assert world.admin.call("GET", f"{PDBS}/budget")["metadata"]["resourceVersion"] == written


def test_a_budget_that_expects_no_pods_allows_nothing(world: Budgets) -> None:
    world.budget(minAvailable=0)
    assert counts(world.status()) == (0, 0, 0, 0)
    assert world.events("NoPods") == ["No matching pods found"]


def test_selectors_nil_and_empty(world: Budgets) -> None:
    world.pod("a", labels={"x": "1"})
    world.budget("none", selector=None, minAvailable=0)
    world.budget("all", selector={}, minAvailable=0)
    assert world.status("none")["expectedPods"] == 0 and world.status("all")["expectedPods"] == 1


def test_max_unavailable_scales_over_the_statefulset(world: Budgets) -> None:
    sts = world.admin.create(f"/apis/apps/v1/namespaces/{NS}/statefulsets", {
        "metadata": {"name": "db"}, "spec": {"replicas": 4, "serviceName": "db", "selector": {"matchLabels": APP},
                                             "template": {"metadata": {"labels": APP}, "spec": {
                                                 "containers": [{"name": "c", "image": "i"}]}}}})
    for name in ("db-0", "db-1", "db-2"):
        world.pod(name, owner=sts)
    world.budget(maxUnavailable="50%")
    assert counts(world.status()) == (4, 2, 3, 1)  # 4 - ceil(50% of 4)
    world.budget("percent", minAvailable="60%")
    assert counts(world.status("percent")) == (4, 3, 3, 0)  # ceil(2.4)


def test_a_percentage_over_job_pods_fails_the_sync_safely(world: Budgets) -> None:
    """A Job has no scale subresource: failSafe writes 0 and SyncFailed, observedGeneration unchanged."""
    job = world.admin.create(f"/apis/batch/v1/namespaces/{NS}/jobs", {"metadata": {"name": "train"}, "spec": {
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}})
    world.pod("train-a", owner=job)
    world.budget(minAvailable=1)
    assert world.status()["disruptionsAllowed"] == 0  # integers need no scale: 1 healthy, 1 desired
    world.budget("percent", maxUnavailable="50%")
    status = world.status("percent")
    assert status["disruptionsAllowed"] == 0 and "observedGeneration" not in status
    (condition,) = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"], condition["message"]) == (
        "DisruptionAllowed", "False", "SyncFailed", "jobs.batch does not implement the scale subresource")
    assert world.events("CalculateExpectedPodCountFailed") == [
        "Failed to calculate the number of expected pods: jobs.batch does not implement the scale subresource"]


def test_the_scale_subresource_of_a_custom_resource(world: Budgets) -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "trainers.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "trainers", "singular": "trainer", "kind": "Trainer"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}},
                                  "subresources": {"scale": {"specReplicasPath": ".spec.workers",
                                                             "statusReplicasPath": ".status.workers"}}}]}}
    world.admin.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    trainer = world.admin.create(f"/apis/example.com/v1/namespaces/{NS}/trainers",
                                 {"metadata": {"name": "t"}, "spec": {"workers": 10}})
    for name in ("t-0", "t-1"):
        world.pod(name, owner=trainer)
    world.budget(minAvailable="10%")
    assert counts(world.status()) == (10, 1, 2, 1)


def test_unmanaged_pods_are_left_out_of_a_percentage(world: Budgets) -> None:
    world.pod("loose")
    world.budget(maxUnavailable="50%")
    assert counts(world.status()) == (0, 0, 1, 0)
    assert [m.startswith("Pods selected by this PodDisruptionBudget") for m in world.events("UnmanagedPods")] == [True]


def test_disrupted_pods_are_not_healthy_until_they_expire(world: Budgets) -> None:
    for name in ("a", "b"):
        world.pod(name)
    world.budget(minAvailable=1)
    world.status()
    long_ago = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    world.admin.patch(f"{PDBS}/budget/status", {"status": {"disruptedPods": {"a": now(), "b": long_ago}}})
    status = world.status()
    assert status["disruptedPods"].keys() == {"a"} and counts(status) == (2, 1, 1, 0)
    assert world.events("NotDeleted") == ["Pod was expected by PDB default/default to be deleted but it wasn't"]


def test_the_printer() -> None:
    resource = LocalCluster().registry.get("policy", "v1", "poddisruptionbudgets")
    assert resource is not None
    pdb = {"metadata": {"name": "web"}, "spec": {"maxUnavailable": "25%"}, "status": {"disruptionsAllowed": 2}}
    table = tables.table(resource, [pdb], "1", "meta.k8s.io/v1", "None")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Min Available", "Max Unavailable",
                                                               "Allowed Disruptions", "Age"]
    assert table["rows"][0]["cells"] == ["web", "N/A", "25%", 2, "<unknown>"]
