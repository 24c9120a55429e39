"""Each gang's PodGroup on the local cluster, end to end: the webhook gates, the gate controller releases and keeps
one PodGroup per gang, the scheduler binds, the kubelet runs, the garbage collector deletes with the root.

The cluster of tests/test_controller_e2e.py (three 4-cpu nodes ``pool=cpu``, two nodes of 4 ``nvidia.com/gpu``,
tainted) with the PodGroup CRD of deploy/base installed. Every PodGroup is read as stored, and a watch records the
phases each one was written with, in order. Expectations come from the scenario: sizes, requests and capacities.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from cluster.local import LocalCluster
from controller.run import Controller
from tests.support.contract import CONTROLLER
from tests.support.gang_pods import (
    CPU_NODES,
    GPU,
    JOB_NAME,
    ROOTS,
    TIMEOUT,
    TWO_POOLS,
    delete_pods,
    describe,
    gated,
    name_of,
    running,
    torch_job,
)
from tests.support.kube import Kube, admitted
from tests.support.kubectl import Kubectl
from tests.support.podgroups import (
    GROUP,
    MANAGED_BY,
    PLURAL,
    VERSION,
    condition,
    install_crd,
    phase,
    podgroup,
    watching,
    writes,
)
from tests.support.polling import stays, wait_for
from tests.support.roots import OPTED_IN, Obj, batch_job, spark_app

pytestmark = pytest.mark.e2e



@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=list(TWO_POOLS), workdir=str(tmp_path_factory.mktemp("podgroup-e2e"))) as local:
        local.run_components()
        yield local


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster, workdir: Any, tls: Any) -> Iterator[Kube]:
    with admitted(cluster, workdir, tls) as api:
        install_crd(api.api_client)
        api.ensure_namespace("kubenexus-system")
        yield api


@pytest.fixture
def ns(kube: Kube) -> Iterator[str]:
    name = kube.namespace()
    yield name
    for group, version, plural in ROOTS:
        for obj in kube.custom.list_namespaced_custom_object(group, version, name, plural)["items"]:
            kube.custom.delete_namespaced_custom_object(group, version, name, plural, obj["metadata"]["name"])
    delete_pods(kube, name)


def wait_podgroup(kube: Kube, ns: str, name: str, check: Callable[[Obj], bool], what: str) -> Obj:
    last: list[Obj | None] = [None]

    def done() -> Obj | None:
        last[0] = podgroup(kube.api_client, ns, name)
        return last[0] if last[0] is not None and check(last[0]) else None

    found: Obj = wait_for(done, TIMEOUT, lambda: f"PodGroup {ns}/{name}: {what}; last seen "
                                                 f"{(last[0] or {}).get('status')}; pods {describe(kube.pods(ns))}")
    return found


def in_phase(*phases: str) -> Callable[[Obj], bool]:
    return lambda obj: phase(obj) in phases


def mark_succeeded(kube: Kube, ns: str, pods: list[Obj]) -> None:
    for pod in pods:
        status = {"phase": "Succeeded", "containerStatuses": [
            {"name": c["name"], "ready": False, "restartCount": 0, "image": "", "imageID": "",
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}} for c in pod["spec"]["containers"]]}
        kube.core.patch_namespaced_pod_status(name_of(pod), ns, {"status": status},
                                              _content_type="application/merge-patch+json")


def follows(seen: list[str], order: list[str]) -> bool:
    """``seen`` goes through phases of ``order`` forward only."""
    positions = [order.index(p) for p in seen if p in order]
    return len(positions) == len(seen) and positions == sorted(positions)


# --- lifecycles ----------------------------------------------------------------------------------------------------


def test_spark_staged_gang_releasing_then_running(kube: Kube, ns: str, cluster: LocalCluster,
                                                  controllers: Callable[..., Controller]) -> None:
    """Driver + 4 executors of 1 cpu: minMember 5, 4 of them expected once the driver runs. The driver is released
    alone (room reserved for the executors), the PodGroup says so (Releasing, 4 expected members; the kubelets
    hold the bound driver back until it is seen), and is Running once the driver and the executors it creates run."""
    controllers()
    app = spark_app("pi", OPTED_IN)
    app["spec"]["driver"].update(coreRequest="1", memory="512m")
    app["spec"]["executor"].update(instances=4, coreRequest="1", memory="512m")
    with watching(kube.api_client, ns) as phases:
        for node in CPU_NODES:
            cluster.stop_kubelet(node)
        try:
            root = kube.create(ns, app)
            wait_podgroup(kube, ns, "pi", lambda o: phase(o) == "Releasing" and o["status"]["expected"] == 4 and o[
                "status"]["waitingFor"] in ("1 to bind", "1 to start"), "Releasing the driver, 4 expected")
        finally:
            for node in CPU_NODES:
                cluster.start_kubelet(node)
        group = wait_podgroup(kube, ns, "pi", lambda o: phase(o) == "Running" and o["status"]["running"] == 5,
                              "Running with 5 members running")
        print(f"\nspark phases: {phases.of('pi')}")
        assert follows(phases.of("pi"), ["Pending", "Releasing", "Running"]), phases.of("pi")
        assert "Releasing" in phases.of("pi"), phases.of("pi")
        releasing = [o for o in phases.seen["pi"] if phase(o) == "Releasing"]
    assert all(o["status"]["expected"] in (0, 4) for o in releasing), releasing
    assert group["spec"] == {"minMember": 5, "expectedMembers": 4}
    assert group["metadata"]["ownerReferences"] == [{"apiVersion": "sparkoperator.k8s.io/v1beta2",
                                                     "kind": "SparkApplication", "name": "pi",
                                                     "uid": root["metadata"]["uid"]}]
    assert group["metadata"]["labels"] == {MANAGED_BY[0]: MANAGED_BY[1],
                                           "scheduling.kubenexus.io/root-kind": "sparkapplication",
                                           "scheduling.kubenexus.io/root-name": "pi"}
    status = group["status"]
    assert (status["members"], status["present"], status["expected"], status["gated"]) == (5, 5, 0, 0)
    assert set(status["nodes"]) <= {"cpu-0", "cpu-1", "cpu-2"} and len(status["nodes"]) >= 2, status["nodes"]
    assert status["scheduleStartTime"] and status["releasedAt"] and status["waitingFor"] == ""
    assert condition(group, "Released")["status"] == "True"
    assert condition(group, "Schedulable")["status"] == "True"


def described_events(kubectl: Kubectl, ns: str, kind: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the Events ``kubectl describe`` lists under an object, in its order."""
    text = kubectl("describe", kind, name, "-n", ns).stdout
    lines = text[text.index("\nEvents:"):].splitlines()[4:]  # after the header and its underline
    return [(parts[1], parts[4]) for line in lines if len(parts := re.split(r"\s{2,}", line.strip(), maxsplit=4)) == 5]


def test_a_release_is_listed_before_the_running_it_led_to(
        cluster: LocalCluster, kube: Kube, ns: str, controllers: Callable[..., Controller], tmp_path: Any) -> None:
    """The driver is released, then its executors into the room held for them, and they run within seconds: the
    Event counting the executors' release is listed before GangRunning, as ``kubectl describe`` lists them."""
    controllers()
    app = spark_app("pi", OPTED_IN)
    app["spec"]["driver"].update(coreRequest="500m", memory="512m")
    app["spec"]["executor"].update(instances=3, coreRequest="500m", memory="512m")
    kube.create(ns, app)
    kubectl = Kubectl(cluster.kubeconfig, tmp_path / "kube-cache")

    def listed() -> list[tuple[str, str]] | None:
        found = described_events(kubectl, ns, "sparkapplication", "pi")
        reasons = [reason for reason, _ in found]
        return found if "GangRunning" in reasons and any("released 4 members" in m for _, m in found) else None

    events = wait_for(listed, TIMEOUT, lambda: f"GangRunning and a release of all 4 members: "
                                               f"{described_events(kubectl, ns, 'sparkapplication', 'pi')}")
    reasons = [reason for reason, _ in events]
    whole = next(i for i, (_, message) in enumerate(events) if "released 4 members" in message)
    assert whole < reasons.index("GangRunning"), events
    assert reasons.index("GangReleased") < whole, "the driver's own release first"


def test_pytorchjob_waiting_then_running_and_succeeded(kube: Kube, ns: str,
                                                      controllers: Callable[..., Controller]) -> None:
    """Two jobs of 4 x 2 GPU, each all 8 GPUs: one runs, the other's PodGroup is Waiting for GPUs; when the first
    succeeds its PodGroup is Succeeded and the second goes Releasing, then Running."""
    controllers()
    with watching(kube.api_client, ns) as phases:
        kube.create(ns, torch_job("alpha", 3, "500m", "1Gi", gpus=2))
        wait_podgroup(kube, ns, "alpha", in_phase("Running"), "alpha Running")
        kube.create(ns, torch_job("beta", 3, "500m", "1Gi", gpus=2))
        beta = wait_podgroup(kube, ns, "beta", in_phase("Waiting"), "beta Waiting")
        assert beta["status"]["waitingFor"] == f"capacity: {GPU}", beta["status"]
        assert GPU in beta["status"]["reason"]
        assert (beta["status"]["present"], beta["status"]["gated"]) == (4, 4)
        assert condition(beta, "Schedulable")["status"] == "False"
        assert condition(beta, "Released") | {"lastTransitionTime": ""} == {
            "type": "Released", "status": "False", "reason": "Waiting", "message": beta["status"]["reason"],
            "lastTransitionTime": "", "observedGeneration": beta["metadata"]["generation"]}
        mark_succeeded(kube, ns, kube.pods(ns, f"{JOB_NAME}=alpha"))
        alpha = wait_podgroup(kube, ns, "alpha", in_phase("Succeeded"), "alpha Succeeded")
        assert (alpha["status"]["succeeded"], alpha["status"]["running"]) == (4, 0)
        wait_podgroup(kube, ns, "beta", lambda o: phase(o) == "Running" and o["status"]["running"] == 4,
                      "beta Running")
        # the watch may deliver that write a moment after the read saw it
        wait_for(lambda: phases.of("beta")[-1:] == ["Running"], TIMEOUT, lambda: f"the watch: {phases.of('beta')}")
        assert follows(phases.of("beta"), ["Pending", "Waiting", "Releasing", "Running"]), phases.of("beta")
        print(f"\nbeta phases: {phases.of('beta')}, alpha phases: {phases.of('alpha')}")
        assert phases.of("beta")[-3:] == ["Waiting", "Releasing", "Running"], phases.of("beta")
        assert follows(phases.of("alpha"), ["Pending", "Releasing", "Running", "Succeeded"]), phases.of("alpha")


def test_never_fits_not_certifiable_and_timed_out(kube: Kube, ns: str,
                                                 controllers: Callable[..., Controller]) -> None:
    controller = controllers()
    kube.create(ns, torch_job("giant", 1, cpu="5"))  # no node has 5 cpu
    spread = torch_job("spread", 1, cpu="100m")
    for replica in spread["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {JOB_NAME: "spread"}}}]
    kube.create(ns, spread)
    kube.create(ns, torch_job("holder", 2, cpu="3"))  # 3 x 3 cpu: 1 cpu left per node
    wait_podgroup(kube, ns, "holder", in_phase("Running"), "holder Running")
    late = torch_job("late", 1, cpu="2")
    late["metadata"]["annotations"]["kubenexus.io/schedule-timeout-seconds"] = "1"
    kube.create(ns, late)

    giant = wait_podgroup(kube, ns, "giant", in_phase("NeverFits"), "NeverFits")
    assert giant["status"]["waitingFor"] == "never fits" and "5 cpu" in giant["status"]["reason"]
    assert condition(giant, "Schedulable")["reason"] == "NeverFits"
    certify = wait_podgroup(kube, ns, "spread", in_phase("NotCertifiable"), "NotCertifiable")
    assert certify["status"]["waitingFor"] == "not certifiable"
    assert "topology" in certify["status"]["reason"]
    timed = wait_podgroup(kube, ns, "late", lambda o: condition(o, "TimedOut").get("status") == "True",
                          "TimedOut")
    assert phase(timed) == "Waiting" and timed["spec"]["scheduleTimeoutSeconds"] == 1
    assert condition(timed, "TimedOut")["reason"] == "ScheduleTimeout"
    stays(lambda: all(gated(p) for p in kube.pods(ns, f"{JOB_NAME}=late")), "the timed-out gang stays gated")
    by_phase = {phase_: controller.metrics.registry.get_sample_value("kubenexus_controller_gangs_by_phase",
                                                                     {"phase": phase_})
                for phase_ in ("NeverFits", "NotCertifiable", "Waiting", "Running")}
    assert by_phase == {"NeverFits": 1.0, "NotCertifiable": 1.0, "Waiting": 1.0, "Running": 1.0}, by_phase


def test_the_podgroup_is_collected_with_its_root(kube: Kube, ns: str,
                                                 controllers: Callable[..., Controller]) -> None:
    controllers()
    kube.create(ns, torch_job("short", 1, cpu="100m"))
    wait_podgroup(kube, ns, "short", in_phase("Running"), "Running")
    kube.custom.delete_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", "short")
    wait_for(lambda: podgroup(kube.api_client, ns, "short") is None and not kube.pods(ns), TIMEOUT,
             lambda: f"the PodGroup and pods collected with their root: {podgroup(kube.api_client, ns, 'short')}")
    stays(lambda: podgroup(kube.api_client, ns, "short") is None, "the controller must not create it again")


# --- bounded writes ------------------------------------------------------------------------------------------------


def test_a_1_plus_40_gang_costs_a_handful_of_writes(cluster: LocalCluster, kube: Kube, ns: str,
                                                    controllers: Callable[..., Controller]) -> None:
    """41 pods arriving one by one (the operator creates them in a loop) and starting: the PodGroup is created once
    and its status written on phase changes and at most every 5 s in between, never once per member."""
    controller = controllers()
    cluster.audit.clear()
    kube.create(ns, torch_job("wide", 40, cpu="100m", memory="64Mi"))
    wait_podgroup(kube, ns, "wide", lambda o: phase(o) == "Running" and o["status"]["running"] == 41, "41 running")
    wait_for(controller.podgroups.idle, TIMEOUT, "the writer idle")
    done = writes(cluster.audit.snapshot(CONTROLLER), ns, "wide")
    creates = [r for r in done if r.request.verb == "create"]
    print(f"\n1 + 40 gang: {len(done)} PodGroup writes ({len(creates)} create): "
          f"{[(r.request.verb, r.request.subresource) for r in done]}")
    assert len(creates) == 1
    assert len(done) <= 10, [r.describe() for r in done]


def test_only_the_leader_writes(kube: Kube, ns: str, controllers: Callable[..., Controller]) -> None:
    replicas = [controllers(leader_elect=True, identity=f"pg-{who}", lease=(2.0, 1.5, 0.2)) for who in "ab"]
    leader = wait_for(lambda: next((r for r in replicas if r.leading), None), TIMEOUT, "a leader")
    standby = next(r for r in replicas if r is not leader)
    kube.create(ns, torch_job("led", 1, cpu="100m"))
    wait_podgroup(kube, ns, "led", in_phase("Running"), "Running")
    assert leader.podgroups.requests["create"] >= 1
    wait_for(lambda: standby.podgroups.synced, TIMEOUT, "the standby keeps its PodGroups warm (listed and watched)")
    assert not standby.podgroups.requests, f"the standby wrote: {standby.podgroups.requests}"


# --- PodGroups users touch -------------------------------------------------------------------------------------------


def test_a_user_created_podgroup_gets_status_only(kube: Kube, ns: str,
                                                  controllers: Callable[..., Controller]) -> None:
    mine = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup",
            "metadata": {"name": "mine", "labels": {"team": "vision"}},
            "spec": {"minMember": 7, "queue": "research"}}
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, mine)
    controllers()
    kube.create(ns, torch_job("mine", 1, cpu="100m"))
    group = wait_podgroup(kube, ns, "mine", lambda o: phase(o) == "Running" and o["status"]["running"] == 2,
                          "Running")
    assert group["spec"] == {"minMember": 7, "queue": "research"}, "its spec is the user's"
    assert group["metadata"]["labels"] == {"team": "vision"} and not group["metadata"].get("ownerReferences")


def test_a_managed_podgroup_is_restored_and_recreated(kube: Kube, ns: str,
                                                      controllers: Callable[..., Controller]) -> None:
    controllers()
    kube.create(ns, torch_job("kept", 1, cpu="100m"))
    group = wait_podgroup(kube, ns, "kept", in_phase("Running"), "Running")
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "kept",  # minMember is immutable
                                               {"spec": {"scheduleTimeoutSeconds": 9}})
    kube.custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "kept",
                                                      {"status": {"phase": "Failed"}})
    wait_podgroup(kube, ns, "kept", lambda o: o["spec"] == {"minMember": 2} and phase(o) == "Running",
                  "spec and status restored")
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "kept")
    again = wait_podgroup(kube, ns, "kept", in_phase("Running"), "created again")
    assert again["metadata"]["uid"] != group["metadata"]["uid"]
    assert again["metadata"]["ownerReferences"] == group["metadata"]["ownerReferences"]


def test_pods_of_the_gang_stay_as_they_are(kube: Kube, ns: str, controllers: Callable[..., Controller]) -> None:
    """Sanity: a PodGroup changes nothing about how the gang is released (pods released onto plans, running)."""
    controllers()
    kube.create(ns, torch_job(f"plain-{uuid.uuid4().hex[:4]}", 2, cpu="500m"))
    wait_for(lambda: len(kube.pods(ns)) == 3 and all(running(p) for p in kube.pods(ns)), TIMEOUT,
             lambda: f"3 running: {describe(kube.pods(ns))}")
    assert len(client.CustomObjectsApi(kube.api_client).list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL)["items"]) == 1


def test_an_explicit_gangs_podgroup_gets_its_status(kube: Kube, ns: str,
                                                   controllers: Callable[..., Controller]) -> None:
    """A user-created PodGroup of minMember 2 that bare pods name is their gang's root: the controller writes its
    status (Pending with one member, Running with both), never its spec or labels, and creates no other."""
    controllers()
    mine = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": "pair"},
            "spec": {"minMember": 2}}
    created = kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, mine)

    def bare(name: str) -> Obj:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {
                "pod-group.scheduling.kubenexus.io/name": "pair"}},
                "spec": {"containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "100m"}}}]}}

    kube.core.create_namespaced_pod(ns, bare("pair-0"))
    pending = wait_podgroup(kube, ns, "pair", in_phase("Pending"), "Pending with one member")
    assert (pending["status"]["present"], pending["status"]["waitingFor"]) == (1, "1 member")
    kube.core.create_namespaced_pod(ns, bare("pair-1"))
    group = wait_podgroup(kube, ns, "pair", lambda o: phase(o) == "Running" and o["status"]["running"] == 2,
                          "Running")
    assert group["spec"] == {"minMember": 2} and group["metadata"]["uid"] == created["metadata"]["uid"]
    assert not group["metadata"].get("labels") and not group["metadata"].get("ownerReferences")
    assert len(kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]) == 1
    delete_pods(kube, ns)  # kubectl delete pods --all: the PodGroup says so within seconds
    gone = wait_podgroup(kube, ns, "pair", lambda o: o["status"]["members"] == 0, "no members")
    assert (phase(gone), gone["status"]["present"], gone["status"]["running"]) == ("Pending", 0, 0), gone["status"]
    assert gone["spec"] == {"minMember": 2}


def test_a_failed_jobs_podgroup_says_its_members_are_gone(kube: Kube, ns: str,
                                                          controllers: Callable[..., Controller]) -> None:
    """A Job of 2 pods that can never fit (5 cpu each, 4-cpu nodes) and backoffLimit 0: one of its gated pods is
    deleted, the Job fails and its Job controller deletes the other: the PodGroup says no member is left."""
    controllers()
    job = batch_job("etl", OPTED_IN, parallelism=2, completions=2)
    job["spec"]["backoffLimit"] = 0
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "5"
    kube.create(ns, job)
    wait_podgroup(kube, ns, "etl", in_phase("NeverFits"), "NeverFits")
    first = kube.pods(ns)[0]
    kube.core.delete_namespaced_pod(name_of(first), ns)
    gone = wait_podgroup(kube, ns, "etl", lambda o: o["status"]["members"] == 0, "no members left")
    assert (phase(gone), gone["status"]["present"], gone["status"]["gated"]) == ("Pending", 0, 0), gone["status"]
    assert "gone" in gone["status"]["reason"], gone["status"]


def test_kubectl_get_podgroups_shows_phase_size_counts_and_what_each_waits_for(
        cluster: LocalCluster, kube: Kube, ns: str, controllers: Callable[..., Controller], tmp_path: Any) -> None:
    """The bundled kubectl against the local cluster (server-side tables from the CRD's printer columns): one gang
    running, one waiting for GPUs, one that can never fit."""
    controllers()
    kube.create(ns, torch_job("runs", 1, "500m", "1Gi", gpus=4))  # 2 x 4 GPU: both GPU nodes
    wait_podgroup(kube, ns, "runs", in_phase("Running"), "Running")
    kube.create(ns, torch_job("waits", 1, "500m", "1Gi", gpus=2))
    kube.create(ns, torch_job("never", 1, cpu="5"))
    wait_podgroup(kube, ns, "waits", in_phase("Waiting"), "Waiting")
    wait_podgroup(kube, ns, "never", in_phase("NeverFits"), "NeverFits")
    kubectl = Kubectl(cluster.kubeconfig, tmp_path / "kube-cache")
    rows = [row for row in kubectl.table("get", "podgroups", "-A") if row["NAMESPACE"] == ns]
    assert list(rows[0]) == ["NAMESPACE", "NAME", "PHASE", "MIN", "PRESENT", "RUNNING", "WAITING-FOR", "AGE"]
    shown = {row["NAME"]: (row["PHASE"], row["MIN"], row["PRESENT"], row["RUNNING"], row["WAITING-FOR"])
             for row in rows}
    assert shown == {"runs": ("Running", "2", "2", "2", ""), "waits": ("Waiting", "2", "2", "0", f"capacity: {GPU}"),
                     "never": ("NeverFits", "2", "2", "0", "never fits")}, shown
    assert all(row["AGE"].endswith(("s", "m")) for row in rows), rows
    names = kubectl.names("get", "podgroups", "-n", ns, "-l",
                          "app.kubernetes.io/managed-by=kubenexus-gate-controller,"
                          "scheduling.kubenexus.io/root-kind=pytorchjob")
    assert sorted(names) == [f"podgroup.scheduling.kubenexus.io/{n}" for n in ("never", "runs", "waits")]
