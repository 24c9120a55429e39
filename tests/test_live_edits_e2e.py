"""Edits to a job whose pods exist mean what they say, on the local cluster with the webhook and the controller
(issue 22): ``kubectl annotate`` prints what the edit does; an opt-out releases the gang's gated pods to ordinary
scheduling at once; pods created after an edit are decided with the new value, never a copy read before it (the
webhook's owner cache is kept current by its watch of roots, kube/fresh_roots.py).

Three 4-cpu nodes (and two GPU nodes no member tolerates). PyTorchJobs whose members need 5 cpu can never fit: their
pods stay gated until an edit says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from cluster.local import LocalCluster
from controller.run import Controller
from kubenexus.local_webhook import LocalWebhook
from tests.support.contract import GROUP, MIN, OPT_IN
from tests.support.deploy import WEBHOOK, register_shipped
from tests.support.gang_pods import JOB_NAME, TIMEOUT, TWO_POOLS, gated, name_of, torch_job, wait_event, wait_pods
from tests.support.kube import Kube
from tests.support.kubectl import Kubectl
from tests.support.podgroups import install_crd
from tests.support.polling import wait_for
from tests.support.roots import Obj, raycluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=list(TWO_POOLS), workdir=str(tmp_path_factory.mktemp("live-edits"))) as local:
        local.run_components()
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    """The admin client, with the webhook behind the shipped configurations (the root entry's warnings too)."""
    hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK), {})
    try:
        hook.wait_ready()
        api = Kube(config.new_client_from_config(cluster.kubeconfig))
        register_shipped(api.api_client, hook.url, hook.certs.ca_bundle_b64())
        install_crd(api.api_client)
        yield api
    finally:
        hook.stop()


@pytest.fixture
def kubectl(cluster: LocalCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(cluster.kubeconfig, tmp_path / "kube-cache")


def gated_job(kube: Kube, ns: str, name: str, **annotations: str) -> list[Obj]:
    """A PyTorchJob of 1 master + 2 workers of 5 cpu (never fits): its 3 members, gated."""
    job = torch_job(name, 2, "5")
    job["metadata"]["annotations"].update(annotations)
    kube.create(ns, job)
    return wait_pods(kube, ns, lambda pods: len(pods) == 3 and all(gated(p) for p in pods), f"{name} gated",
                     f"{JOB_NAME}={name}")


def recreated(kube: Kube, ns: str, pod: Obj) -> Obj:
    """Delete ``pod``; the training operator creates it again (same name, a new uid)."""
    uid = pod["metadata"]["uid"]
    kube.core.delete_namespaced_pod(name_of(pod), ns, grace_period_seconds=0)
    return wait_for(lambda: next((p for p in kube.pods(ns) if name_of(p) == name_of(pod)
                                  and p["metadata"]["uid"] != uid), None), TIMEOUT, f"{name_of(pod)} recreated")


def test_an_opt_out_releases_the_gang_at_once_and_new_pods_are_left_alone(
        kube: Kube, kubectl: Kubectl, controllers: Callable[..., Controller]) -> None:
    ns = kube.namespace()
    controllers()
    members = gated_job(kube, ns, "big")
    done = kubectl("-n", ns, "annotate", "pytorchjob", "big", f"{OPT_IN}=false", "--overwrite")
    assert (f"Warning: kubenexus: {OPT_IN}=false: the gate controller releases this PyTorchJob's gated pods to "
            "ordinary scheduling now") in done.stderr, done.stderr
    wait_pods(kube, ns, lambda pods: len(pods) == 3 and not any(gated(p) for p in pods), "all three ungated",
              f"{JOB_NAME}=big")
    assert any("3 gated member(s) released to ordinary scheduling" in note
               for note in wait_event(kube, ns, "PyTorchJob", "big", "GangOptedOut"))
    again = recreated(kube, ns, members[1])
    assert not gated(again) and GROUP not in (again["metadata"].get("labels") or {}), \
        "decided with the opt-out, not with the root the webhook read before it"


def test_pods_created_after_a_min_available_edit_get_the_new_size_and_the_edit_warns(
        kube: Kube, kubectl: Kubectl, controllers: Callable[..., Controller]) -> None:
    ns = kube.namespace()
    controllers()
    members = gated_job(kube, ns, "resize", **{"kubenexus.io/min-available": "3"})
    assert {p["metadata"]["labels"][MIN] for p in members} == {"3"}
    done = kubectl("-n", ns, "annotate", "pytorchjob", "resize", "kubenexus.io/min-available=2", "--overwrite")
    assert "Warning: kubenexus: kubenexus.io/min-available changed: it applies to pods created from now on" \
        in done.stderr, done.stderr
    assert "delete and resubmit the PyTorchJob" in done.stderr
    again = recreated(kube, ns, members[2])
    assert again["metadata"]["labels"][MIN] == "2", "decided with the edit, not a cached copy of the job"


def test_a_job_left_to_its_own_gang_scheduler_hears_so_once_in_an_event(kube: Kube) -> None:
    """A RayCluster in an enabled namespace that names the KubeRay batch scheduler volcano: its pods are admitted
    unchanged (correctly), and the RayCluster itself gets an Event saying so, once per webhook worker, not per pod
    (the pods' creator is the operator, who reads no warnings)."""
    ns = kube.namespace()
    kube.core.patch_namespace(ns, {"metadata": {"labels": {OPT_IN: "enabled"}}})
    cluster = raycluster("native", {})
    cluster["metadata"]["labels"] = {"ray.io/scheduler-name": "volcano"}
    kube.create(ns, cluster)
    pods = wait_pods(kube, ns, lambda found: len(found) >= 3, "the RayCluster's pods")
    assert not any(gated(p) or GROUP in (p["metadata"].get("labels") or {}) for p in pods)
    notes = wait_event(kube, ns, "RayCluster", "native", "GangSchedulingSkipped")
    assert 1 <= len(notes) <= 2 < len(pods), (notes, len(pods))  # the webhook runs two workers
    assert notes[0] == ("RayCluster native: KubeNexus admits its pods without gang scheduling: RayCluster uses the "
                        "KubeRay batch scheduler volcano: its own gang scheduler schedules its pods, not KubeNexus "
                        "(remove that setting to have KubeNexus gang-schedule it)")
