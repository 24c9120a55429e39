"""A cluster where no scheduler serves the schedulerName the webhook injects (issue 22): the local cluster runs only
``default-scheduler``, the webhook (default configuration) points gang members at ``kubenexus-scheduler``.

A released gang whose pods nobody touches is noticed within ``bindTimeoutSeconds`` (2 s here): an event and its
PodGroup say so, naming the schedulerName and the fix; its pods hold no room and are not evicted; the next gang waits
for a scheduler, not for capacity; ``kubenexus doctor``'s checks report both as problems. Once a scheduler of that
name runs, the first gang binds and the second is released.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from cluster.local import LocalCluster
from cluster.scheduler import Scheduler
from controller.run import Controller
from gang.config import Config
from kube.client import new_api_client
from kubenexus.doctor import Cluster, check_gated, check_podgroups
from tests.support.gang_pods import JOB_NAME, TWO_POOLS, gated, running, torch_job, wait_event, wait_pods
from tests.support.kube import Kube, admitted
from tests.support.podgroups import install_crd, podgroup
from tests.support.polling import stays, wait_for

pytestmark = pytest.mark.e2e

SCHEDULER = "kubenexus-scheduler"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=list(TWO_POOLS), workdir=str(tmp_path_factory.mktemp("no-scheduler"))) as local:
        local.run_components(scheduler_names=("default-scheduler",))
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    with admitted(cluster, workdir, tls) as api:
        install_crd(api.api_client)
        yield api


def scheduled(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    status = (podgroup(kube.api_client, ns, name) or {}).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Scheduled"), {})


def test_a_gang_no_scheduler_picks_up_is_noticed_and_holds_nothing_until_one_runs(
        cluster: LocalCluster, kube: Kube, controller_kubeconfig: str) -> None:
    ns = kube.namespace()
    controller = Controller(new_api_client(controller_kubeconfig, 32, 3), Config(bind_timeout_seconds=2.0),
                            port=0).start()
    try:
        kube.create(ns, torch_job("first", 1, "2"))  # 2 x 2 cpu on three 4-cpu nodes
        released = wait_pods(kube, ns, lambda pods: len(pods) == 2 and not any(gated(p) for p in pods),
                             "first released", f"{JOB_NAME}=first")
        assert {p["spec"]["schedulerName"] for p in released} == {SCHEDULER}
        condition = wait_for(lambda: scheduled(kube, ns, "first") if scheduled(kube, ns, "first").get(
            "status") == "False" else None, 20.0, lambda: f"Scheduled False: {podgroup(kube.api_client, ns, 'first')}")
        assert condition["reason"] == "NoScheduler" and f"schedulerName '{SCHEDULER}'" in condition["message"]
        assert "schedulerName: keep" in condition["message"], condition
        notes = wait_event(kube, ns, "PyTorchJob", "first", "GangNotScheduled")
        assert any(SCHEDULER in note for note in notes), notes

        kube.create(ns, torch_job("second", 1, "1"))
        second = wait_for(lambda: (lambda s: s if s.get("waitingFor") == "a scheduler" else None)(
            (podgroup(kube.api_client, ns, "second") or {}).get("status") or {}), 20.0, "second waits for a scheduler")
        assert second["phase"] == "Waiting" and SCHEDULER in second["reason"], second
        stays(lambda: all(gated(p) for p in kube.pods(ns, f"{JOB_NAME}=second")), "no release to nobody")
        assert all(not p["spec"].get("nodeName") for p in kube.pods(ns, f"{JOB_NAME}=first")), "none evicted"

        doctor = Cluster(kube.api_client)

        def problems() -> list[str] | None:
            now = datetime.datetime.now(datetime.UTC)
            found = [f.text for f in check_podgroups(doctor, Config(), now) + check_gated(doctor, Config(), now)
                     if not f.ok]
            first = any(f"{ns}/first" in text and "not picked up by any scheduler" in text for text in found)
            return found if first and any(f"{ns}/second" in text and "GangNotScheduled" in text
                                          for text in found) else None

        wait_for(problems, 20.0, "the doctor's checks report both gangs")
        not_scheduled = "kubenexus_controller_gangs_not_scheduled"  # the alert KubeNexusNoScheduler's series
        wait_for(lambda: controller.metrics.registry.get_sample_value(not_scheduled) == 2, 20.0, "both counted")

        late = Scheduler(cluster.api, (SCHEDULER,))  # the scheduler is installed
        cluster.components.append(late)
        late.start()
        wait_pods(kube, ns, lambda pods: len(pods) == 4 and all(running(p) for p in pods), "both gangs running")
        wait_for(lambda: scheduled(kube, ns, "first").get("status") == "True", 20.0, "first: Scheduled True")
        wait_for(lambda: controller.metrics.registry.get_sample_value(not_scheduled) == 0, 20.0, "none counted")
    finally:
        controller.stop()
