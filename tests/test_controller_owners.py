"""Pods admission left unresolved: asked again, they join their gang, or are released at once, or wait."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from controller.members import pod_view
from controller.owners import resolve, root_reference
from gang.config import Config
from gang.objects import LookupFailed, MemorySource
from tests.support.contract import GATE, GROUP, MIN, OWNER, OWNER_UID, UNRESOLVED
from tests.support.operator_fixtures import OPT_IN, owner_string, training_job, training_pod

pytestmark = pytest.mark.unit


class FailingSource:
    """An API that cannot answer (timeouts, 5xx)."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise LookupFailed("GET: HTTP 503")


def unresolved(job: dict[str, Any], replica: str = "Worker", index: int = 0) -> dict[str, Any]:
    """A training pod as admission stored it when the owner lookup failed: gated, marked, no gang labels."""
    pod = training_pod(job, replica, index)
    pod["metadata"].update(uid=f"uid-{replica}-{index}", annotations={UNRESOLVED: "GET: timeout"})
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    pod["spec"]["schedulerName"] = "kubenexus-scheduler"
    return pod


def test_a_member_joins_its_gang_with_the_labels_admission_would_have_written():
    job = training_job("PyTorchJob", "ml", "bert", {"Master": 1, "Worker": 3}, annotations=OPT_IN)
    pod = unresolved(job)
    resolution = resolve(pod, MemorySource([job]), Config())
    assert resolution.action == "join"
    joined = jsonpatch.apply_patch(copy.deepcopy(pod), resolution.patch)
    assert joined["metadata"]["labels"][GROUP] == "bert" and joined["metadata"]["labels"][MIN] == "4"
    annotations = joined["metadata"]["annotations"]
    assert UNRESOLVED not in annotations
    assert annotations[OWNER] == owner_string(job) and annotations[OWNER_UID] == job["metadata"]["uid"]
    assert joined["spec"] == pod["spec"], "only metadata changes: the gate stays until the gang fits"
    view = pod_view(joined)
    assert view.gang == ("ml", "bert", job["metadata"]["uid"]) and view.gated


def test_a_pod_that_is_not_a_gang_member_is_released_at_once():
    job = training_job("PyTorchJob", "ml", "adhoc", {"Master": 1})
    pod = unresolved(job, "Master")
    resolution = resolve(pod, MemorySource([job]), Config())
    assert resolution.action == "release"
    released = jsonpatch.apply_patch(copy.deepcopy(pod), resolution.patch)
    assert "schedulingGates" not in released["spec"]
    assert UNRESOLVED not in released["metadata"]["annotations"]


def test_an_api_that_still_fails_means_try_again_later():
    job = training_job("PyTorchJob", "ml", "bert", {"Master": 1}, annotations=OPT_IN)
    resolution = resolve(unresolved(job, "Master"), FailingSource(), Config())
    assert resolution.action == "retry" and "503" in resolution.reason and resolution.patch == []


def test_the_root_reference_comes_from_the_owner_annotation():
    job = training_job("PyTorchJob", "ml", "bert", {"Master": 1}, annotations=OPT_IN)
    member = training_pod(job, "Master", 0)
    member["metadata"].update(uid="m", labels={**member["metadata"]["labels"], GROUP: "bert", MIN: "1"},
                              annotations={OWNER: owner_string(job), OWNER_UID: job["metadata"]["uid"]})
    view = pod_view(member)
    assert root_reference(view) == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert",
                                    "namespace": "ml", "uid": job["metadata"]["uid"]}
