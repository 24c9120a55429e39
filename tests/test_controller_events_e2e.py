"""The gate controller's events on the local cluster, counted through the API: a 1 + 40 PyTorchJob whose members
arrive one by one makes a handful of events, not one per arriving member, and their notes tell the counts of the
moment they were written.

The members are created here, one at a time, as the training operator creates them (same names, labels, owner
reference), so that their arrival is paced like the issue's (41 pods over about 8 s and more); the webhook admits
them and the controller decides. Every write the controller makes is in the emulator's audit log, every Event it
wrote is listed through events.k8s.io/v1 and checked against the API's own rules (``tests/support/events``).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cluster.controllers import Client
from cluster.crds import crd_manifests
from cluster.local import ADMIN, LocalCluster, NodeSpec
from cluster.operators.base import owner_ref, pod_from_template
from cluster.store import ApiError
from controller.run import Controller
from gang.config import Config
from kube.client import new_api_client
from tests.support.contract import CONTROLLER
from tests.support.events import about, count, list_events, problems
from tests.support.gang_pods import TIMEOUT, gated, running, torch_job
from tests.support.kube import Kube, admitted
from tests.support.polling import wait_for
from tests.support.roots import Obj

pytestmark = pytest.mark.e2e

NODES = [NodeSpec(f"cpu-{i}", cpu="8", memory="32Gi", labels=(("pool", "cpu"),)) for i in range(3)]
PREFIX = "training.kubeflow.org"
WAITING = re.compile(r"(\d+)/41 members present")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Scheduler and kubelets, no operators: the test is the training operator, at its own pace."""
    with LocalCluster(nodes=list(NODES), workdir=str(tmp_path_factory.mktemp("events-e2e"))) as local:
        local.run_components(operators=False)
        admin = Client(local.api, ADMIN)
        for crd in crd_manifests():
            with contextlib.suppress(ApiError):
                admin.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    with admitted(cluster, workdir, tls) as api:
        yield api


@pytest.fixture
def controller(cluster: LocalCluster) -> Iterator[Controller]:
    started = Controller(new_api_client(cluster.add_user(CONTROLLER), 32, 3), Config(), port=0).start()
    yield started
    started.stop()


def members_of(job: Obj) -> Iterator[Obj]:
    """The training operator's pods for ``job``: master-0, then worker-0.., from their templates."""
    name = job["metadata"]["name"]
    for replica_type, spec in job["spec"]["pytorchReplicaSpecs"].items():
        for index in range(spec["replicas"]):
            labels = {f"{PREFIX}/job-name": name, f"{PREFIX}/operator-name": "pytorchjob-controller",
                      f"{PREFIX}/replica-type": replica_type.lower(), f"{PREFIX}/replica-index": str(index)}
            if replica_type == "Master":
                labels[f"{PREFIX}/job-role"] = "master"
            yield pod_from_template(spec["template"], labels, [owner_ref(job)],
                                    name=f"{name}-{replica_type.lower()}-{index}")


def controller_writes(cluster: LocalCluster) -> list[str]:
    """The controller's writes of Events (creates and series updates), as the apiserver served them."""
    return [r.describe() for r in cluster.audit.snapshot(CONTROLLER)
            if r.request.resource == "events" and r.request.verb in ("create", "patch", "update")]


def arrive(kube: Kube, ns: str, job: Obj, every: float, check: Callable[[], None] | None = None) -> None:
    for pod in members_of(job):
        kube.core.create_namespaced_pod(ns, pod)
        if check is not None:
            check()
        time.sleep(every)


def test_a_1_plus_40_gang_arriving_member_by_member_makes_a_handful_of_events(
        cluster: LocalCluster, kube: Kube, controller: Controller) -> None:
    """41 members 0.3 s apart (12 s): GangWaiting when the first arrives and again only when the number missing has
    at least halved (and 10 s have passed); GangReleased once for all 41, GangRunning once; nothing on the members
    (they hear of waiting for capacity, not for their siblings)."""
    ns = kube.namespace()
    job = kube.create(ns, torch_job("bert", 40, "100m", "64Mi"))
    cluster.audit.clear()
    arrive(kube, ns, job, 0.3, lambda: assert_no_member_event(kube, ns))
    wait_for(lambda: sum(1 for p in kube.pods(ns) if running(p) and not gated(p)) == 41, TIMEOUT,
             "all 41 members released and running")
    wait_for(lambda: about(list_events(kube.api_client, ns), "PyTorchJob", "bert", "GangRunning"), TIMEOUT,
             "the GangRunning event")
    assert controller.events.flush(5)
    time.sleep(2.5)  # a pass or more later: nothing more is told
    events = [e for e in list_events(kube.api_client, ns) if e.get("reportingController") == "kubenexus-controller"]
    for event in events:
        assert not problems(event), (problems(event), event)
    summary = [(e["regarding"]["kind"], e["reason"], e["note"], count(e)) for e in events]
    assert all(kind == "PyTorchJob" for kind, *_ in summary), f"events on members: {summary}"

    waiting = [e["note"] for e in about(events, "PyTorchJob", "bert", "GangWaiting")]
    assert 1 <= len(waiting) <= 4, summary
    present = [int(WAITING.fullmatch(note).group(1)) for note in waiting]  # type: ignore[union-attr]
    assert present == sorted(present) and len(set(present)) == len(present), waiting
    missing = [41 - n for n in present]
    assert all(after * 2 <= before for before, after in zip(missing, missing[1:], strict=False)), (
        f"a note only once the number missing has halved: {waiting}")

    [released] = about(events, "PyTorchJob", "bert", "GangReleased")
    assert re.fullmatch(r"released 41 members of gang bert on a plan over \d node(s)?: all 41 members fit on "
                        r"\d node\(s\)", released["note"]), released["note"]
    [run] = about(events, "PyTorchJob", "bert", "GangRunning")
    assert run["note"] == "gang bert runs: 41 of its 41 members running"
    assert len(events) <= 6, f"at most a handful: {summary}"
    writes = controller_writes(cluster)
    assert len(writes) == sum(count(e) for e in events) <= 6, writes
    assert controller.events.dropped == 0


def assert_no_member_event(kube: Kube, ns: str) -> None:
    """While members arrive: the notes written so far are true (never more present than created) and no member
    got one."""
    events = list_events(kube.api_client, ns)
    assert not [e for e in events if e["regarding"]["kind"] == "Pod"], events
    created = len(kube.pods(ns))
    for event in about(events, "PyTorchJob", "bert", "GangWaiting"):
        assert int(WAITING.fullmatch(event["note"]).group(1)) <= created, (event["note"], created)  # type: ignore[union-attr]


def test_a_burst_of_members_makes_one_waiting_event_and_one_release(
        cluster: LocalCluster, kube: Kube, controller: Controller) -> None:
    """As the operator creates them: all 41 within a second or two."""
    ns = kube.namespace()
    job = kube.create(ns, torch_job("burst", 40, "100m", "64Mi"))
    arrive(kube, ns, job, 0.0)
    wait_for(lambda: about(list_events(kube.api_client, ns), "PyTorchJob", "burst", "GangRunning"), TIMEOUT,
             "the GangRunning event")
    assert controller.events.flush(5)
    events = list_events(kube.api_client, ns)
    reasons = sorted(e["reason"] for e in events if e.get("reportingController") == "kubenexus-controller")
    assert reasons in (["GangReleased", "GangRunning"], ["GangReleased", "GangRunning", "GangWaiting"]), reasons
