"""Least privilege, proven (issue 5): the rendered RBAC allows every request the components make, and nothing more.

One local cluster (apiserver, scheduler, kubelet, every emulated operator) runs the product as installed:

- the real ``kubenexus webhook`` as ``system:serviceaccount:kubenexus-system:kubenexus-webhook``, with
  self-managed certificates (``certs ensure`` at start-up creates the Secret and writes the CA bundle into both
  webhook configurations; its periodic pass repairs a Secret damaged later), behind the webhook configurations
  of ``deploy/base`` (only ``clientConfig.service`` becomes a URL: the emulator does not route Services);
- two gate controller replicas with leader election as ``...:kubenexus-controller``;
- with the rendered Roles, ClusterRoles and bindings stored in the cluster and RBAC enforced for both identities
  (``LocalCluster.enforce_rbac``), so the product really runs with exactly these permissions.

Roots of every kind the webhook reads are created (the builders of ``test_cluster_e2e``), plus a Spark run of a
ScheduledSparkApplication and a Job of a CronJob, so that the webhook walks every owner kind; the controller
releases gangs, writes events (one repeated, so that its series is patched), holds and hands over the Lease, and
resolves three pods that admission left unresolved (written as admission stores them when its owner or PodGroup
lookup failed: the emulator cannot make an apiserver read fail), one of them naming a user-created PodGroup that a
bare pod names too. The emulator records every request with its user; the tests then check them against the RBAC
objects of ``kubectl kustomize deploy/base``, evaluated as the RBAC authorizer does (cluster/rbac.py): every request
of a component must be allowed by the roles bound to its ServiceAccount (plus the default discovery roles every
authenticated user has), and every verb x resource x resourceName of those roles must have been used at least once.
No wildcards.
"""

from __future__ import annotations

import copy
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from cluster.audit import Record, request_info
from cluster.local import LocalCluster
from cluster.rbac import BOOTSTRAP, Grant, Policy, PolicyRule, rule_allows
from controller.run import Controller
from gang import queues
from gang.adapters.table import ROOT_RESOURCES
from gang.config import Config
from kube.client import new_api_client
from kube.events import EventRecorder
from kubenexus.local_webhook import LocalWebhook
from tests.support.contract import GATE, GROUP, MIN, MIN_AVAILABLE, UNRESOLVED
from tests.support.deploy import (
    NAMESPACE,
    SECRET,
    WEBHOOK,
    Obj,
    bundles_installed,
    register_shipped,
    render,
    secret_bundle,
)
from tests.support.events import list_events
from tests.support.kube import Kube, pods_resource
from tests.support.podgroups import GROUP as PODGROUP_GROUP
from tests.support.podgroups import PLURAL as PODGROUP_PLURAL
from tests.support.podgroups import VERSION as PODGROUP_VERSION
from tests.support.podgroups import podgroup
from tests.support.polling import wait_for
from tests.support.roots import (
    OPTED_IN,
    TRAINING_KINDS,
    batch_job,
    jobset,
    lws,
    mpijob,
    pytorchjob,
    raycluster,
    rayjob,
    rayservice,
    spark_app,
    tfjob,
    training_job,
    training_runtime,
    trainjob,
    workflow,
)

pytestmark = pytest.mark.e2e

CONTROLLER = f"system:serviceaccount:{NAMESPACE}:kubenexus-controller"
TIMEOUT = 30.0
PODGROUPS = (PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL)
QUEUES = (queues.GROUP, queues.VERSION, queues.PLURAL)
QUEUE = "kubenexus.io/queue"


def groups_of(username: str) -> tuple[str, ...]:
    """The groups a service account token authenticates with (the emulator's add_user gives the same)."""
    namespace = username.split(":")[2]
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated")


# --- the permissions, unit by unit ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One verb on one resource (or URL), of one name when the rule lists resourceNames, where a grant applies."""

    grant: str
    namespace: str | None
    rule: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def policy_rule(self) -> PolicyRule:
        return {key: list(values) for key, values in self.rule}

    def describe(self) -> str:
        r = self.policy_rule
        what = ",".join(r.get("resources") or r.get("nonResourceURLs") or [])
        group = (r.get("apiGroups") or [""])[0]
        names = f" {r['resourceNames'][0]}" if r.get("resourceNames") else ""
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.grant}: {r['verbs'][0]} {what}{'.' + group if group else ''}{names}{where}"


def units(grant: Grant) -> list[Unit]:
    found: list[Unit] = []
    for rule in grant.rules:
        for verb in rule.get("verbs") or []:
            if rule.get("nonResourceURLs"):
                found += [Unit(grant.role, grant.namespace, (("verbs", (verb,)), ("nonResourceURLs", (url,))))
                          for url in rule["nonResourceURLs"]]
                continue
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for name in rule.get("resourceNames") or [None]:
                        parts = [("verbs", (verb,)), ("apiGroups", (group,)), ("resources", (resource,))]
                        if name is not None:
                            parts.append(("resourceNames", (name,)))
                        found.append(Unit(grant.role, grant.namespace, tuple(parts)))
    return found


def used(unit: Unit, records: list[Record]) -> bool:
    return any((unit.namespace is None or r.request.namespace == unit.namespace)
               and rule_allows(unit.policy_rule, r.request) for r in records)


# --- rendering and running ----------------------------------------------------------------------------------------


@dataclass
class Run:
    rendered: list[Obj]
    records: dict[str, list[Record]] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)  # what the scenario saw happen

    def policy(self) -> Policy:
        return Policy(self.rendered)

    def grants(self, user: str) -> list[Grant]:
        return list(self.policy().grants(user, groups_of(user)))


def unresolved_copy(pod: Obj, name: str) -> Obj:
    """``pod`` as admission stores a pod whose owner lookup failed: same owners, gated, marked, no gang keys."""
    meta = pod["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in (GROUP, MIN)}
    spec = {k: v for k, v in pod["spec"].items() if k not in ("nodeName", "affinity")}
    spec.update(schedulingGates=[{"name": GATE}], schedulerName="kubenexus-scheduler")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                         "ownerReferences": meta["ownerReferences"],
                         "annotations": {UNRESOLVED: "GET owner: HTTP 503 (the apiserver was unavailable)"}},
            "spec": spec, "status": {"phase": "Pending"}}


def escaped_copy(pod: Obj, name: str) -> Obj:
    """``pod`` as it is stored when admission let it through (webhook down): same owners, no gate, no gang keys;
    it fits no node, so it stays unbound."""
    meta = pod["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in (GROUP, MIN)}
    spec = {k: v for k, v in pod["spec"].items() if k not in ("nodeName", "affinity", "schedulingGates")}
    spec["nodeSelector"] = {"example.com/no-such-node": "true"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                         "ownerReferences": meta["ownerReferences"]},
            "spec": spec, "status": {"phase": "Pending"}}


def unused_units(run: Run, cluster: LocalCluster) -> list[str]:
    missing = []
    for user in (WEBHOOK, CONTROLLER):
        records = cluster.audit.snapshot(user)
        missing += [u.describe() for g in run.grants(user) for u in units(g) if not used(u, records)]
    return missing


def create_roots(kube: Kube, ns: str) -> dict[str, Obj]:
    """A root of every kind the webhook reads, opted in; returns them by kind."""
    roots: dict[str, Obj] = {}
    builders = [spark_app("spark-pi", OPTED_IN), pytorchjob("resnet", OPTED_IN), tfjob("mnist", OPTED_IN),
                *[training_job(kind, kind.lower(), OPTED_IN) for kind in TRAINING_KINDS],
                mpijob("allreduce", OPTED_IN), jobset("llm", OPTED_IN), raycluster("ray", OPTED_IN),
                rayjob("train", OPTED_IN), rayservice("serve", OPTED_IN), lws("vllm", OPTED_IN),
                batch_job("etl", OPTED_IN), workflow("pipeline", {**OPTED_IN, MIN_AVAILABLE: "2"})]
    kube.create(ns, training_runtime("torch", initializer=False))
    builders.append(trainjob("fine-tune", OPTED_IN, "torch"))
    for obj in builders:
        roots[obj["kind"]] = kube.create(ns, obj)
    # left to its own gang scheduler: the webhook tells the application so, in an Event (webhook/skips.py)
    native = spark_app("native", OPTED_IN)
    native["spec"]["batchScheduler"] = "volcano"
    kube.create(ns, native)
    # A run of a ScheduledSparkApplication: the schedule is the root and carries the opt-in.
    template = spark_app("unused", {})["spec"]
    schedule = kube.create(ns, {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "ScheduledSparkApplication",
                                "metadata": {"name": "nightly", "annotations": dict(OPTED_IN)},
                                "spec": {"schedule": "@daily", "concurrencyPolicy": "Forbid", "template": template}})
    roots["ScheduledSparkApplication"] = schedule
    run_app = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
               "metadata": {"name": "nightly-1", "ownerReferences": [owner_reference(schedule)]},
               "spec": copy.deepcopy(template)}
    kube.create(ns, run_app)
    # A Job of a CronJob (no CronJob controller runs here: the Job is created as it would create it).
    cron = kube.create(ns, {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly-etl"},
                            "spec": {"schedule": "@daily", "jobTemplate": {"spec": batch_job("x", {})["spec"]}}})
    cron_job = batch_job("nightly-etl-28000000", {}, parallelism=1, completions=1)
    cron_job["metadata"]["ownerReferences"] = [owner_reference(cron)]
    roots["CronJob-Job"] = kube.create(ns, cron_job)
    return roots


def owner_reference(obj: Obj) -> Obj:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True}


def install_crds(kube: Kube, rendered: list[Obj]) -> None:
    """The product's own CRDs (the PodGroup, the Queue), created as `kubectl apply` would."""
    extensions = client.ApiextensionsV1Api(kube.api_client)
    for obj in rendered:
        if obj.get("kind") == "CustomResourceDefinition":
            extensions.create_custom_resource_definition(obj)


def install_rbac(kube: Kube, rendered: list[Obj]) -> None:
    """The rendered Roles, ClusterRoles and bindings, stored in the cluster as `kubectl apply` would."""
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    create = {"ClusterRole": rbac.create_cluster_role, "ClusterRoleBinding": rbac.create_cluster_role_binding,
              "Role": lambda obj: rbac.create_namespaced_role(obj["metadata"]["namespace"], obj),
              "RoleBinding": lambda obj: rbac.create_namespaced_role_binding(obj["metadata"]["namespace"], obj)}
    for obj in rendered:
        if obj.get("kind") in create and obj.get("apiVersion", "").startswith("rbac.authorization.k8s.io/"):
            create[obj["kind"]](obj)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, tls: Any) -> Iterator[Run]:
    workdir = tmp_path_factory.mktemp("least-privilege")
    result = Run(render())
    with LocalCluster(workdir=str(workdir)) as cluster:
        cluster.run_components()
        kube = Kube(config.new_client_from_config(cluster.kubeconfig))
        kube.core.create_namespace({"metadata": {"name": NAMESPACE}})
        install_crds(kube, result.rendered)
        install_rbac(kube, result.rendered)
        cluster.enforce_rbac(WEBHOOK, CONTROLLER)  # the components run with exactly these permissions
        started: list[Any] = []
        try:
            result.checks = scenario(cluster, kube, workdir, tls, result, started)
        finally:
            for component in reversed(started):
                component.stop()
        result.records = {user: cluster.audit.snapshot(user) for user in (WEBHOOK, CONTROLLER)}
    yield result


def scenario(cluster: LocalCluster, kube: Kube, workdir: Path, tls: Any, result: Run,
             started: list[Any]) -> dict[str, Any]:
    checks: dict[str, Any] = {}
    # --- the webhook, managing its own certificates ---
    certdir = workdir / "webhook-certs"
    hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK), {
        "server": {"certDir": str(certdir)},
        "certs": {"extraSANs": ["127.0.0.1"], "checkIntervalSeconds": 0.5}})
    started.append(hook)
    register_shipped(kube.api_client, hook.url, rendered=result.rendered)
    wait_for(lambda: bundles_installed(kube), TIMEOUT, "the Secret created and its CA bundle in both configurations")
    bundle = secret_bundle(kube)
    assert bundle is not None
    hook.context = ssl.create_default_context(cadata=bundle.decode())
    hook.wait_ready()
    checks["secret created"] = True

    # --- two controller replicas, one leading ---
    controller_kubeconfig = cluster.add_user(CONTROLLER)
    replicas = [Controller(new_api_client(controller_kubeconfig, 32, 3), Config(), leader_elect=True,
                           identity=f"replica-{who}", lease=(2.0, 1.5, 0.2)) for who in ("a", "b")]
    for replica in replicas:
        started.append(replica.start())
    leader = wait_for(lambda: next((r for r in replicas if r.leading), None), TIMEOUT, "a leading replica")

    # --- workloads of every kind ---
    ns = kube.namespace()
    roots = create_roots(kube, ns)

    def gang_roots() -> set[str]:
        annotations = [(p["metadata"].get("annotations") or {}).get("scheduling.kubenexus.io/owner", "")
                       for p in kube.pods(ns)]
        return {a.split("/")[-2] for a in annotations if a}

    expected = set(roots) - {"CronJob-Job"}  # its root, the CronJob, is not opted in: no gang
    checks["gang roots"] = wait_for(lambda: (lambda seen: seen if expected <= seen else None)(gang_roots()),
                                    TIMEOUT, lambda: f"gangs of every root kind {sorted(expected)}, "
                                                     f"saw {sorted(gang_roots())}")

    def pods_with(key: str, value: str) -> list[Obj]:
        return [p for p in kube.pods(ns) if (p["metadata"].get("labels") or {}).get(key) == value]

    # executors (owned by the driver pod) and LWS workers (StatefulSet owned by the leader pod)
    wait_for(lambda: pods_with("spark-role", "executor"), TIMEOUT, "Spark executors: the driver was released")
    workers = wait_for(lambda: [p for p in kube.pods(ns) if any(
        r["kind"] == "StatefulSet" and r["name"] != "vllm" for r in p["metadata"].get("ownerReferences") or [])],
        TIMEOUT, "LeaderWorkerSet worker pods")
    cron_pods = wait_for(lambda: pods_with("batch.kubernetes.io/job-name", "nightly-etl-28000000"), TIMEOUT,
                         "the CronJob's Job's pod")

    # --- a Queue (the CRD as rendered) selecting a namespace, and a root there naming it: the webhook checks it
    # against its watch of Queues, the controller admits the gang by its quota (reading the namespace's labels from
    # its watch) and writes the Queue's status ---
    queued = kube.namespace({"team": "queued"})
    kube.custom.create_cluster_custom_object(QUEUES[0], QUEUES[1], QUEUES[2], {
        "apiVersion": f"{QUEUES[0]}/{QUEUES[1]}", "kind": "Queue", "metadata": {"name": "team-q"},
        "spec": {"namespaceSelector": {"matchLabels": {"team": "queued"}}, "nominalQuota": {"cpu": "100"}}})
    kube.create(queued, batch_job("queued", {**OPTED_IN, QUEUE: "team-q"}))

    def admitted() -> int:
        queue = kube.custom.get_cluster_custom_object(QUEUES[0], QUEUES[1], QUEUES[2], "team-q")
        return int((queue.get("status") or {}).get("admittedGangs") or 0)

    checks["queue admitted"] = wait_for(admitted, TIMEOUT, "the Queue's status counting the gang it admitted")

    # --- each gang's PodGroup: created, its status written; a drifted spec is restored ---
    def resnet_group() -> Obj | None:
        return podgroup(kube.api_client, ns, "resnet")

    wait_for(lambda: (resnet_group() or {}).get("status"), TIMEOUT, "the PodGroup of the PyTorchJob with a status")
    kube.custom.patch_namespaced_custom_object(PODGROUPS[0], PODGROUPS[1], ns, PODGROUPS[2], "resnet",
                                               {"spec": {"scheduleTimeoutSeconds": 99}})  # minMember is immutable
    checks["podgroup spec restored"] = wait_for(
        lambda: (lambda spec: spec.get("minMember") if "scheduleTimeoutSeconds" not in spec else None)(
            (resnet_group() or {}).get("spec", {})), TIMEOUT, lambda: f"the PodGroup's spec restored: {resnet_group()}")

    # --- pods admission left unresolved: the controller decides again, reading every root kind as admission does
    # (its constraints it reads from its watch of roots, never by GET) ---
    owners = {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get("scheduling.kubenexus.io/owner")
              for p in kube.pods(ns)}
    members = {owner.split("/")[-2]: p for p in kube.pods(ns) if (owner := owners[p["metadata"]["name"]])}
    copies = [(workers[0], "vllm-unresolved"), (cron_pods[0], "cron-unresolved"),
              *((pod, f"{kind.lower()}-unresolved") for kind, pod in members.items())]
    for source, name in copies:
        cluster.store.create(pods_resource(cluster), unresolved_copy(source, name), ns)

    def resolved() -> bool:
        pods = {p["metadata"]["name"]: p for p in kube.pods(ns)}
        return all(UNRESOLVED not in (pods[n]["metadata"].get("annotations") or {}) for _, n in copies)

    wait_for(resolved, TIMEOUT, "every unresolved pod resolved by the controller")
    joined = next(p for p in kube.pods(ns) if p["metadata"]["name"] == "vllm-unresolved")
    checks["resolved"] = (joined["metadata"]["labels"].get(GROUP), bool(joined["spec"].get("schedulingGates")))

    # --- a user-created PodGroup (the CRD as rendered): the webhook reads it for a bare pod naming it, the
    # controller for a pod naming it that admission left unresolved ---
    [crd] = [o for o in result.rendered if o.get("kind") == "CustomResourceDefinition"
             and o["metadata"]["name"] == "podgroups.scheduling.kubenexus.io"]
    try:
        client.ApiextensionsV1Api(kube.api_client).create_custom_resource_definition(crd)
    except client.ApiException as exc:  # the emulator may serve it already
        if exc.status != 409:
            raise
    group = client.CustomObjectsApi(kube.api_client).create_namespaced_custom_object(
        "scheduling.kubenexus.io", "v1alpha1", ns, "podgroups",
        {"apiVersion": "scheduling.kubenexus.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "pair"},
         "spec": {"minMember": 2}})
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pair-0", "labels": {GROUP: "pair"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    kube.core.create_namespaced_pod(ns, bare)
    stored = copy.deepcopy(bare)
    stored["metadata"].update(name="pair-1", annotations={UNRESOLVED: "reading PodGroup: HTTP 503"})
    stored["spec"].update(schedulingGates=[{"name": GATE}], schedulerName="kubenexus-scheduler")
    cluster.store.create(pods_resource(cluster), stored, ns)

    def pair_owners() -> set[str]:
        return {(p["metadata"].get("annotations") or {}).get("scheduling.kubenexus.io/owner-uid", "")
                for p in kube.pods(ns) if p["metadata"]["name"] in ("pair-0", "pair-1")}

    checks["podgroup"] = wait_for(lambda: pair_owners() == {group["metadata"]["uid"]}, TIMEOUT,
                                  lambda: f"both pods members of PodGroup pair, saw owner uids {pair_owners()}")

    # --- a pod that escaped admission and is not bound: the controller deletes it, for its operator to recreate ---
    cluster.store.create(pods_resource(cluster), escaped_copy(workers[0], "vllm-escaped"), ns)
    checks["escaped"] = wait_for(lambda: "vllm-escaped" not in {p["metadata"]["name"] for p in kube.pods(ns)},
                                 TIMEOUT, "the escaped pod deleted")

    # --- a repeated event's series is patched (the recorder's repeat interval shortened from 60 s) ---
    recorder = EventRecorder(new_api_client(controller_kubeconfig, 4, 0), repeat_interval=0.0)
    reference = {"apiVersion": "batch/v1", "kind": "Job", "name": "etl", "namespace": ns,
                 "uid": roots["Job"]["metadata"]["uid"]}
    message = f"2/3 members present ({uuid.uuid4().hex[:6]})"
    for _ in range(2):
        recorder.record(reference, "Normal", "GangWaiting", message, "HoldGate")
        assert recorder.flush(10)
    recorder.close()
    [event] = [e for e in list_events(kube.api_client, ns) if e.get("note") == message]
    checks["event count"] = (event.get("series") or {}).get("count")

    # --- certificate drift: the Secret loses its serving certificate; the webhook's periodic pass re-issues it ---
    kube.core.patch_namespaced_secret(SECRET, NAMESPACE, [{"op": "remove", "path": "/data/tls.crt"}])
    wait_for(lambda: "tls.crt" in (kube.core.read_namespaced_secret(SECRET, NAMESPACE).data or {}), TIMEOUT,
             "the serving certificate restored in the Secret")

    # --- leader failover ---
    leader.stop()
    standby = next(r for r in replicas if r is not leader)
    standby_identity = "replica-b" if leader is replicas[0] else "replica-a"
    wait_for(lambda: standby.leading, TIMEOUT, "the standby replica to take the Lease over")
    checks["lease holder"] = wait_for(lambda: (lambda holder: holder if holder == standby_identity else None)(
        client.CoordinationV1Api(kube.api_client).read_namespaced_lease(
            "kubenexus-controller", NAMESPACE).spec.holder_identity), TIMEOUT, "the Lease naming the new leader")

    # --- preemption: a gang of higher priority needs a whole node; the priority-0 pods there are its victims (each
    # marked DisruptionTarget through pods/status, then deleted) ---
    client.SchedulingV1Api(kube.api_client).create_priority_class(
        {"metadata": {"name": "urgent"}, "value": 1000})
    node = wait_for(lambda: next((p["spec"]["nodeName"] for p in kube.pods(ns) if p["spec"].get("nodeName")
                                  and not p["metadata"].get("deletionTimestamp")), None), TIMEOUT, "a bound pod")
    urgent = pytorchjob("urgent", OPTED_IN)
    master = urgent["spec"]["pytorchReplicaSpecs"].pop("Master")
    urgent["spec"]["pytorchReplicaSpecs"] = {"Master": master}
    master["template"]["spec"].update(priorityClassName="urgent", nodeSelector={"kubernetes.io/hostname": node})
    master["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "8"  # the whole node
    kube.create(ns, urgent)

    def disrupted() -> list[str]:
        return [p["metadata"]["name"] for p in kube.pods(ns) if any(
            c.get("type") == "DisruptionTarget" for c in (p.get("status") or {}).get("conditions") or [])]

    checks["preempted"] = wait_for(disrupted, TIMEOUT, "pods on the node marked DisruptionTarget")

    # everything the roles grant has been used by now, or soon (the controller reads roots as gangs wait)
    deadline = time.monotonic() + TIMEOUT
    while unused_units(result, cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    return checks


# --- the checks ----------------------------------------------------------------------------------------------------


def test_the_scenario_exercised_the_components(run: Run) -> None:
    """Sanity: what the permissions are proven against really happened."""
    assert run.checks["secret created"]
    assert run.checks["resolved"][0], "the unresolved LWS worker joined its gang"
    assert run.checks["podgroup"], "a bare pod and a resolved one joined the user-created PodGroup"
    assert run.checks["escaped"], "the escaped LWS worker was deleted"
    assert run.checks["event count"] == 2
    assert run.checks["lease holder"], "the standby took the Lease over"
    assert run.checks["preempted"], "a gang of higher priority preempted pods"
    assert run.checks["podgroup spec restored"] == 3, "the PyTorchJob's master and 2 workers"
    assert run.checks["queue admitted"] == 1, "the Job naming the Queue, in a namespace it selects"
    for user in (WEBHOOK, CONTROLLER):
        assert len(run.records[user]) > 50, f"{user} made only {len(run.records[user])} requests"


@pytest.mark.parametrize("user", [WEBHOOK, CONTROLLER], ids=["webhook", "controller"])
def test_every_request_is_allowed_by_the_rendered_roles(run: Run, user: str) -> None:
    policy = Policy([*run.rendered, *BOOTSTRAP])  # the default roles every authenticated user has
    denied = sorted({r.describe() for r in run.records[user] if not policy.authorize(user, groups_of(user),
                                                                                      r.request)})
    assert not denied, "requests the rendered RBAC would deny:\n" + "\n".join(denied)
    refused = sorted({r.describe() for r in run.records[user] if r.status == 403})
    assert not refused, "requests the cluster refused (RBAC enforced):\n" + "\n".join(refused)


@pytest.mark.parametrize("user", [WEBHOOK, CONTROLLER], ids=["webhook", "controller"])
def test_every_permission_is_used(run: Run, user: str) -> None:
    grants = run.grants(user)
    assert grants, f"no binding in the rendered manifests applies to {user}"
    unused = [u.describe() for g in grants for u in units(g) if not used(u, run.records[user])]
    assert not unused, "permissions no recorded request used:\n" + "\n".join(unused)


def test_the_roles_are_bound_to_exactly_their_component() -> None:
    policy = Policy(render())
    assert {g.role for g in policy.grants(WEBHOOK, groups_of(WEBHOOK))} == {
        "ClusterRole/kubenexus-webhook", f"Role/{NAMESPACE}/kubenexus-webhook-certs"}
    assert {g.role for g in policy.grants(CONTROLLER, groups_of(CONTROLLER))} == {
        "ClusterRole/kubenexus-controller", f"Role/{NAMESPACE}/kubenexus-controller-leases"}
    other = "system:serviceaccount:default:default"
    assert not list(policy.grants(other, groups_of(other)))


def test_no_wildcards_and_no_write_access_to_owner_kinds() -> None:
    rendered = render()
    for obj in rendered:
        if obj.get("kind") in ("ClusterRole", "Role"):
            for rule in obj.get("rules") or []:
                for key in ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs"):
                    assert not any("*" in value for value in rule.get(key) or []), (obj["metadata"]["name"], rule)
    webhook = next(o for o in rendered if o.get("kind") == "ClusterRole" and o["metadata"]["name"] ==
                   "kubenexus-webhook")
    roots = {(root.group, root.plural) for root in ROOT_RESOURCES}
    for rule in webhook["rules"]:
        if rule["resources"] == ["namespaces"]:  # watched for their opt-in label (kube/namespaces.py)
            assert rule["verbs"] == ["list", "watch"], rule
        elif all((group, plural) in roots for group in rule["apiGroups"] for plural in rule["resources"]):
            assert rule["verbs"] == ["get", "list", "watch"], f"roots: read, and watched for edits: {rule}"
        elif rule["apiGroups"] == ["events.k8s.io"]:  # webhook/skips.py: an Event on a job left alone, never updated
            assert rule["verbs"] == ["create"], rule
        elif rule["resources"] == [queues.PLURAL]:  # watched for the warnings on roots (kube/queues.py)
            assert rule["verbs"] == ["list", "watch"], rule
        elif rule.get("apiGroups") != ["admissionregistration.k8s.io"]:
            assert rule["verbs"] == ["get"], f"the webhook reads owners, never writes or lists them: {rule}"


def test_an_unexercised_or_missing_permission_fails_the_check(run: Run) -> None:
    """The check can fail: a request outside the roles is denied, and an extra rule is reported unused."""
    policy = Policy([*run.rendered, *BOOTSTRAP])
    secret = request_info("GET", "/api/v1/namespaces/x/secrets/y")
    assert not policy.authorize(WEBHOOK, groups_of(WEBHOOK), secret)
    delete = request_info("DELETE", "/api/v1/namespaces/x/pods")
    assert not policy.authorize(CONTROLLER, groups_of(CONTROLLER), delete)
    extra = Grant("ClusterRoleBinding/kubenexus-controller", "ClusterRole/kubenexus-controller", None,
                  ({"apiGroups": [""], "resources": ["pods"], "verbs": ["deletecollection"]},))
    assert [u.describe() for u in units(extra) if not used(u, run.records[CONTROLLER])] == [
        "ClusterRole/kubenexus-controller: deletecollection pods"]

