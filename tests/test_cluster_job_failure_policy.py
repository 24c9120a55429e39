"""A Job's podFailurePolicy as the apiserver validates it and the Job controller applies it (Kubernetes docs: Jobs >
Pod failure policy, Handling retriable and non-retriable pod failures with Pod failure policy), and the pod garbage
collector that ends unscheduled pods being deleted. In process: the emulated apiserver of an unstarted
LocalCluster, the controllers' passes run by the test, pod statuses written by the test standing in for kubelets."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from cluster.controllers import Client
from cluster.local import ADMIN, LocalCluster
from cluster.operators.job import TRACKING, JobController, match_pod_failure_policy
from cluster.podgc import PodGC
from cluster.store import ApiError
from cluster.validation.job import validate_job_policies

pytestmark = pytest.mark.unit

NS = "default"
JOBS, PODS = f"/apis/batch/v1/namespaces/{NS}/jobs", f"/api/v1/namespaces/{NS}/pods"
IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget",
                                                                           "status": "True"}]}]}


def failed(*containers: tuple[str, int], conditions: tuple[dict[str, str], ...] = (),
           init: tuple[tuple[str, int], ...] = ()) -> dict[str, Any]:
    def statuses(items: tuple[tuple[str, int], ...]) -> list[dict[str, Any]]:
        return [{"name": n, "state": {"terminated": {"exitCode": code}}} for n, code in items]

    return {"metadata": {"name": "p", "namespace": NS}, "status": {
        "phase": "Failed", "conditions": list(conditions), "containerStatuses": statuses(containers),
        "initContainerStatuses": statuses(init)}}


# --- matching -----------------------------------------------------------------------------------------------------


def test_exit_code_rules() -> None:
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In",
                                                              "values": [42]}},
                        {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
                        {"action": "Count", "onExitCodes": {"operator": "In", "values": [1]}}]}
    assert match_pod_failure_policy(policy, failed(("main", 42))) == (
        "Container main for pod default/p failed with exit code 42 matching FailJob rule at index 0", True,
        "FailJob")
    assert match_pod_failure_policy(policy, failed(("side", 42))) == (None, False, "Ignore")  # not main: NotIn [1, 2]
    assert match_pod_failure_policy(policy, failed(("main", 1))) == (None, True, "Count")
    assert match_pod_failure_policy(policy, failed(("main", 2))) == (None, True, None)  # no rule: counted
    assert match_pod_failure_policy(policy, failed(("main", 0), init=(("setup", 42),))) == (None, False, "Ignore")
    assert match_pod_failure_policy(policy, failed()) == (None, True, None)  # no exit code at all (rejected pod)


def test_condition_rules() -> None:
    disrupted = ({"type": "DisruptionTarget", "status": "True"},)
    assert match_pod_failure_policy(IGNORE_DISRUPTIONS, failed(("main", 137), conditions=disrupted)) == (
        None, False, "Ignore")
    assert match_pod_failure_policy(IGNORE_DISRUPTIONS, failed(("main", 137))) == (None, True, None)
    fail = {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
    assert match_pod_failure_policy(fail, failed(conditions=disrupted))[0] == (
        "Pod default/p has condition DisruptionTarget matching FailJob rule at index 0")
    assert match_pod_failure_policy(None, failed(conditions=disrupted)) == (None, True, None)


# --- validation and defaults ---------------------------------------------------------------------------------------


def job(policy: Any = None, restart: str = "Never", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"template": {"spec": {"restartPolicy": restart,
                                                  "containers": [{"name": "main", "image": "i"}]}}, **spec}
    if policy is not None:
        body["podFailurePolicy"] = policy
    return {"metadata": {"name": "train"}, "spec": body}


@pytest.mark.parametrize(("body", "errors"), [
    (job(IGNORE_DISRUPTIONS, restart="OnFailure"),
     ['spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy '
      "is specified"]),
    (job(IGNORE_DISRUPTIONS, restart="Always"),
     ['spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"']),
    (job(restart="Always"), []),  # without a podFailurePolicy the emulator leaves restartPolicy alone
    (job({"rules": [{"onExitCodes": {"operator": "In", "values": [0, 3, 3, 1], "containerName": "x"}}]}),
     ['spec.podFailurePolicy.rules[0].action: Required value: valid values: ["Count" "FailIndex" "FailJob" "Ignore"]',
      'spec.podFailurePolicy.rules[0].onExitCodes.containerName: Invalid value: "x": must be one of the container '
      "or initContainer names in the pod template",
      "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator",
      "spec.podFailurePolicy.rules[0].onExitCodes.values[2]: Duplicate value: 3",
      "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: [0,3,3,1]: must be ordered"]),
    (job({"rules": [{"action": "FailIndex", "onPodConditions": [{"type": "Bad Type", "status": "Maybe"}]}]}),
     ['spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set',
      'spec.podFailurePolicy.rules[0].onPodConditions[0].type: Invalid value: "Bad Type": name part must consist of '
      "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
      "'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
      "[A-Za-z0-9]')",
      'spec.podFailurePolicy.rules[0].onPodConditions[0].status: Unsupported value: "Maybe": supported values: '
      '"False", "True", "Unknown"']),
    (job({"rules": [{"action": "Count"}]}),
     ["spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and OnPodConditions is required"]),
    (job(IGNORE_DISRUPTIONS, podReplacementPolicy="TerminatingOrFailed"),
     ['spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported values: "Failed"']),
])
def test_validation(body: dict[str, Any], errors: list[str]) -> None:
    assert validate_job_policies(body) == errors


@dataclass
class World:
    cluster: LocalCluster
    admin: Client
    controller: JobController

    def job(self, policy: Any = None, backoff_limit: int = 0) -> dict[str, Any]:
        return self.admin.create(JOBS, job(policy, backoffLimit=backoff_limit))

    def pods(self) -> list[dict[str, Any]]:
        return self.admin.call("GET", PODS)["items"]

    def status(self) -> dict[str, Any]:
        return self.admin.call("GET", f"{JOBS}/train")["status"]

    def conditions(self) -> list[tuple[str, str, str]]:
        return [(c["type"], c["reason"], c["message"]) for c in self.status().get("conditions") or []]

    def finish(self, pod: dict[str, Any], code: int, *conditions: dict[str, str]) -> None:
        """What the kubelet writes for a container that ended with ``code``."""
        self.admin.patch(f"{PODS}/{pod['metadata']['name']}/status", {"status": {
            "phase": "Failed", "conditions": list(conditions),
            "containerStatuses": [{"name": "main", "image": "i", "imageID": "", "ready": False, "restartCount": 0,
                                   "state": {"terminated": {"exitCode": code}}}]}}, kind="strategic-merge")


@pytest.fixture
def world() -> Iterator[World]:
    cluster = LocalCluster()
    yield World(cluster, Client(cluster.api, ADMIN), JobController(cluster.api))


def test_defaults_and_the_apiserver_s_refusal(world: World) -> None:
    spec = world.job({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]})["spec"]
    assert spec["podReplacementPolicy"] == "Failed"
    assert spec["podFailurePolicy"]["rules"][0]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    assert world.admin.create(JOBS, {**job(), "metadata": {"name": "plain"}})["spec"]["podReplacementPolicy"] == \
        "TerminatingOrFailed"
    with pytest.raises(ApiError) as refused:
        world.admin.create(JOBS, {**job(IGNORE_DISRUPTIONS, restart="OnFailure"), "metadata": {"name": "bad"}})
    assert (refused.value.code, refused.value.message) == (
        422, 'Job.batch "bad" is invalid: spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" '
             "is supported when podFailurePolicy is specified")


def test_a_disrupted_pod_is_not_counted_with_an_ignore_rule(world: World) -> None:
    world.job(IGNORE_DISRUPTIONS)
    world.controller.reconcile()
    (pod,) = world.pods()
    world.finish(pod, 137, {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"})
    world.controller.reconcile()
    status = world.status()
    assert (status["failed"], status["uncountedTerminatedPods"]["failed"], world.conditions()) == (0, [], [])
    assert TRACKING not in (world.pods()[0]["metadata"].get("finalizers") or [])  # released


def test_a_failure_no_rule_ignores_counts_toward_the_backoff_limit(world: World) -> None:
    world.job(IGNORE_DISRUPTIONS)
    world.controller.reconcile()
    world.finish(world.pods()[0], 1)
    world.controller.reconcile()
    world.controller.reconcile()
    assert world.status()["failed"] == 1
    assert world.conditions() == [("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff "
                                                                            "limit"),
                                  ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")]


def test_a_fail_job_rule_fails_the_job_with_its_message(world: World) -> None:
    world.job({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}, backoff_limit=6)
    world.controller.reconcile()
    (pod,) = world.pods()
    world.finish(pod, 42)
    world.controller.reconcile()
    world.controller.reconcile()
    message = f"Container main for pod default/{pod['metadata']['name']} failed with exit code 42 matching FailJob " \
              "rule at index 0"
    assert world.conditions() == [("FailureTarget", "PodFailurePolicy", message),
                                  ("Failed", "PodFailurePolicy", message)]


def test_with_a_policy_a_deleted_pod_is_neither_counted_nor_replaced_until_it_has_failed(world: World) -> None:
    world.job(IGNORE_DISRUPTIONS)
    world.controller.reconcile()
    (pod,) = world.pods()
    name = pod["metadata"]["name"]
    world.admin.create(f"{PODS}/{name}/binding", {"metadata": {"name": name}, "target": {"name": "node-0"}})
    world.admin.call("DELETE", f"{PODS}/{name}")  # graceful: it is bound
    world.controller.reconcile()
    assert (len(world.pods()), world.status()["failed"], world.status()["terminating"]) == (1, 0, 1)
    world.finish(pod, 137)  # its kubelet stopped it: Failed, not disrupted
    world.controller.reconcile()
    world.controller.reconcile()
    assert world.status()["failed"] == 1 and world.conditions()[0][:2] == ("FailureTarget", "BackoffLimitExceeded")


def test_pod_gc_ends_an_unscheduled_pod_being_deleted(world: World) -> None:
    """Without a kubelet, only PodGC can end it: Failed, then deleted with grace 0 (its finalizer still holds it)."""
    world.job(IGNORE_DISRUPTIONS)
    world.controller.reconcile()
    (pod,) = world.pods()
    world.admin.call("DELETE", f"{PODS}/{pod['metadata']['name']}")
    world.controller.reconcile()
    assert world.status()["failed"] == 0 and world.pods()[0]["status"]["phase"] == "Pending"
    PodGC(world.cluster.api).reconcile()
    (pod,) = world.pods()
    assert (pod["status"]["phase"], pod["metadata"]["deletionGracePeriodSeconds"]) == ("Failed", 0)
    world.controller.reconcile()
    world.controller.reconcile()
    assert world.status()["failed"] == 1 and world.pods() == []  # counted, released, gone
