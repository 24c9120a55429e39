"""Queues on the local cluster (issue 24): the Queue CRD of deploy/base, the webhook gating PyTorchJob members, the
gate controller deciding on quota and nodes together and writing each Queue's status.

Four nodes of 4 cpu (``pool=cpu``): 16 cpu, more than any Queue below allows, so the nodes never decide alone. Each
test has namespaces of its own (labelled with a team the test's Queues select) and deletes its Queues and jobs
afterwards.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

from cluster.local import LocalCluster, NodeSpec
from controller.run import Controller
from gang.config import Config
from gang.queues import GROUP, PLURAL, VERSION
from kube.client import new_api_client
from tests.support.gang_pods import JOB_NAME, TIMEOUT, gated, running, torch_job, wait_event, wait_pods
from tests.support.kube import Kube, admitted
from tests.support.podgroups import install_crd, podgroup
from tests.support.polling import stays, wait_for

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
CRD = Path(__file__).resolve().parent.parent / "deploy" / "base" / "queue-crd.yaml"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    nodes = [NodeSpec(f"q-{i}", cpu="4", memory="16Gi", labels=(("pool", "cpu"),)) for i in range(4)]
    with LocalCluster(nodes=nodes, workdir=str(tmp_path_factory.mktemp("queues"))) as local:
        local.run_components(preemption=True)
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    with admitted(cluster, workdir, tls) as api:
        install_crd(api.api_client)
        client.ApiextensionsV1Api(api.api_client).create_custom_resource_definition(yaml.safe_load(CRD.read_text()))
        wait_for(lambda: _served(api), TIMEOUT, "the Queue CRD served")
        yield api


def _served(kube: Kube) -> bool:
    try:
        kube.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    except ApiException:
        return False
    return True


@pytest.fixture(scope="module")
def controller(kube: Kube, controller_kubeconfig: str) -> Iterator[Controller]:
    started = Controller(new_api_client(controller_kubeconfig, 32, 3), Config(), port=0).start()
    yield started
    started.stop()


class Team:
    """The test's namespaces (one per team label) and Queues, removed afterwards."""

    def __init__(self, kube: Kube) -> None:
        self.kube, self.tag = kube, uuid.uuid4().hex[:6]
        self.namespaces: dict[str, str] = {}
        self.queues: list[str] = []

    def ns(self, team: str) -> str:
        if team not in self.namespaces:
            self.namespaces[team] = self.kube.namespace({"team": f"{team}-{self.tag}"})
        return self.namespaces[team]

    def queue(self, name: str, cpu: str, team: str = "", cohort: str = "", **spec: Any) -> str:
        body: Obj = {"nominalQuota": {"cpu": cpu}, **spec}
        if team:
            self.ns(team)
            body["namespaceSelector"] = {"matchLabels": {"team": f"{team}-{self.tag}"}}
        if cohort:
            body["cohort"] = f"{cohort}-{self.tag}"
        full = f"{name}-{self.tag}"
        self.kube.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Queue", "metadata": {"name": full}, "spec": body})
        self.queues.append(full)
        return full

    def status(self, queue: str) -> Obj:
        return dict(self.kube.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, queue).get("status") or {})

    def close(self) -> None:
        for ns in self.namespaces.values():
            for job in self.kube.custom.list_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs")["items"]:
                with contextlib.suppress(ApiException):
                    self.kube.custom.delete_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs",
                                                                     job["metadata"]["name"])
            for pod in self.kube.pods(ns):
                with contextlib.suppress(ApiException):
                    self.kube.core.delete_namespaced_pod(pod["metadata"]["name"], ns, grace_period_seconds=0)
        for queue in self.queues:
            with contextlib.suppress(ApiException):
                self.kube.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, queue)
        wait_for(lambda: not any(self.kube.pods(ns) for ns in self.namespaces.values()), TIMEOUT,
                 "the test's pods gone")


@pytest.fixture
def team(kube: Kube, controller: Controller) -> Iterator[Team]:
    made = Team(kube)
    yield made
    made.close()


def job(name: str, workers: int, cpu: str, **annotations: str) -> Obj:
    obj = torch_job(name, workers, cpu)
    for replica in obj["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["terminationGracePeriodSeconds"] = 0
    obj["metadata"]["annotations"].update(annotations)
    return obj


def solo(name: str, cpu: str) -> Obj:
    obj = job(name, 0, cpu)
    del obj["spec"]["pytorchReplicaSpecs"]["Worker"]
    return obj


def runs(kube: Kube, ns: str, name: str, size: int) -> list[Obj]:
    return wait_pods(kube, ns, lambda pods: len(pods) == size and all(map(running, pods)), f"{name} running",
                     f"{JOB_NAME}={name}")


def group_status(kube: Kube, ns: str, name: str) -> Obj:
    return dict((podgroup(kube.api_client, ns, name) or {}).get("status") or {})


def waits_for(kube: Kube, ns: str, name: str, what: str) -> Obj:
    """The gang's PodGroup once it waits for ``what`` (its waitingFor), its members gated."""
    def found() -> Obj | None:
        status = group_status(kube, ns, name)
        pods = kube.pods(ns, f"{JOB_NAME}={name}")
        return status if status.get("waitingFor") == what and pods and all(map(gated, pods)) else None
    return wait_for(found, TIMEOUT, lambda: f"{ns}/{name} waiting for {what}: {group_status(kube, ns, name)}")


def status_is(team: Team, queue: str, check: Callable[[Obj], bool], what: str) -> Obj:
    return wait_for(lambda: (lambda s: s if check(s) else None)(team.status(queue)), TIMEOUT,
                    lambda: f"Queue {queue}: {what}; status {team.status(queue)}")


def test_quota_holds_a_gang_while_the_nodes_are_free_and_frees_it_when_usage_drops(kube: Kube, team: Team) -> None:
    qa = team.queue("qa", "4", "a")
    ns = team.ns("a")
    kube.create(ns, job("first", 1, "2"))  # 2 x 2 cpu: all of qa's 4
    runs(kube, ns, "first", 2)
    kube.create(ns, job("second", 1, "1"))  # 2 more: 6 > 4, while 12 cpu of the nodes are free
    status = waits_for(kube, ns, "second", "quota")
    assert status["reason"] == f"queue {qa}: cpu 4/4 nominal; the gang needs 2", status["reason"]
    assert (podgroup(kube.api_client, ns, "second") or {})["spec"]["queue"] == qa
    status_is(team, qa, lambda s: s.get("usageSummary") == "cpu 4/4" and s.get("admittedGangs") == 1
              and s.get("pendingGangs") == 1, "4/4 used, one gang admitted, one pending")
    kube.custom.delete_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", "first")
    runs(kube, ns, "second", 2)
    status_is(team, qa, lambda s: s.get("usageSummary") == "cpu 2/4" and s.get("pendingGangs") == 0, "2/4 used")


def test_borrowing_from_the_cohort_and_a_borrowing_limit(kube: Kube, team: Team) -> None:
    # qa (4) and qb (8, idle) share cohort research: qa's 2 x 3 cpu borrows 2; qc (4, borrowingLimit 1) cannot.
    qa = team.queue("qa", "4", "a", "research")
    team.queue("qb", "8", "b", "research")
    qc = team.queue("qc", "4", "c", "research", borrowingLimit={"cpu": "1"})
    kube.create(team.ns("a"), job("wide", 1, "3"))
    runs(kube, team.ns("a"), "wide", 2)
    status_is(team, qa, lambda s: s.get("borrowing") == {"cpu": "2"} and s.get("weightedShare", 0) > 0,
              "borrowing 2 cpu, a weighted share above 0")
    kube.create(team.ns("c"), job("capped", 1, "3"))
    status = waits_for(kube, team.ns("c"), "capped", "quota")
    assert status["reason"] == f"queue {qc}: cpu 0/4 nominal, borrowing limit 1; the gang needs 6", status["reason"]


def test_a_lender_reclaims_from_a_borrower_whole_while_the_borrowers_own_share_keeps_running(
        kube: Kube, team: Team) -> None:
    # qa and qb (4 cpu each, cohort research). qb runs base (2 x 2, its own 4) and then extra (2 x 2, borrowed from
    # qa). qa's mine (2 x 2) is within qa's nominal but the cohort has 0 free: it takes extra back, whole.
    qa = team.queue("qa", "4", "a", "research")
    qb = team.queue("qb", "4", "b", "research")
    b = team.ns("b")
    kube.create(b, job("base", 1, "2"))
    base = runs(kube, b, "base", 2)
    # creation times have a resolution of one second: extra must be the newer gang, as Kueue orders victims
    newest = max(datetime.fromisoformat(p["metadata"]["creationTimestamp"]) for p in base)
    wait_for(lambda: datetime.now(UTC) >= newest + timedelta(seconds=1), TIMEOUT, "the next second")
    kube.create(b, job("extra", 1, "2"))
    extra = runs(kube, b, "extra", 2)
    status_is(team, qb, lambda s: s.get("borrowing") == {"cpu": "4"}, "qb borrowing 4")
    kube.create(team.ns("a"), job("mine", 1, "2"))
    runs(kube, team.ns("a"), "mine", 2)
    preempting = wait_event(kube, team.ns("a"), "PyTorchJob", "mine", "GangPreempting")
    assert any(f"as its Queue {qa} allows" in note and "/extra (priority 0, 2 pods)" in note for note in preempting)
    now = {p["metadata"]["uid"] for p in kube.pods(b)}
    assert not {p["metadata"]["uid"] for p in extra} & now, "extra preempted, all of it"
    assert {p["metadata"]["uid"] for p in base} <= now and all(map(running, kube.pods(b, f"{JOB_NAME}=base")))
    # whatever extra's operator does, it runs again only within quota: none of it while qa uses its share
    stays(lambda: not any(running(p) for p in kube.pods(b, f"{JOB_NAME}=extra")), "extra stays out")


def test_two_weighted_queues_share_what_the_cohort_lends_one_to_two(kube: Kube, team: Team) -> None:
    # lender (nominal 0 at first), light (weight 1) and heavy (weight 2), 0 nominal each, cohort pool: ten 1 cpu
    # jobs each wait. Then the lender gets 12 cpu: light's share rises twice as fast as heavy's, 4 and 8 start.
    lender = team.queue("lender", "0", "c", "pool")
    team.queue("light", "0", "a", "pool")
    team.queue("heavy", "0", "b", "pool", fairSharing={"weight": 2})
    for team_name in ("a", "b"):
        for i in range(10):
            kube.create(team.ns(team_name), solo(f"j{i}", "1"))
    for team_name in ("a", "b"):
        wait_for(lambda t=team_name: sum(group_status(kube, team.ns(t), f"j{i}").get("waitingFor") == "quota"
                                         for i in range(10)) == 10, TIMEOUT, f"team {team_name}'s ten jobs queued")
    kube.custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, lender, {"spec": {"nominalQuota": {"cpu": "12"}}})

    def started() -> tuple[int, int]:
        return tuple(sum(1 for p in kube.pods(team.ns(t)) if not gated(p)) for t in ("a", "b"))  # type: ignore[return-value]

    wait_for(lambda: sum(started()) == 12, TIMEOUT, lambda: f"12 started: {started()}")
    stays(lambda: started() == (4, 8), lambda: f"light 4, heavy 8: {started()}")


def test_a_gang_naming_a_missing_queue_waits_until_it_exists(kube: Kube, team: Team) -> None:
    ns = team.ns("a")
    name = f"later-{team.tag}"
    kube.create(ns, job("named", 1, "1", **{"kubenexus.io/queue": name}))
    status = waits_for(kube, ns, "named", "its queue")
    assert f"its root names Queue '{name}'" in status["reason"] and "does not exist" in status["reason"]
    team.queue("later", "4")  # named, selecting no namespace
    runs(kube, ns, "named", 2)
    assert (podgroup(kube.api_client, ns, "named") or {})["spec"]["queue"] == name
