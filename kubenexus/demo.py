"""``kubenexus demo``: gang admission and release on the embedded local cluster, as a timeline.

Starts the local cluster (apiserver, scheduler, kubelet, operators), generates certificates,
starts and registers ``kubenexus webhook``, starts the gate controller, and submits: a Spark
application, two PyTorchJobs that compete for the same GPUs, one that can never fit, and a job
that did not opt in. It prints what happens to every pod, the webhook's reasons and the
controller's events; halfway through, the first GPU job finishes and the waiting one starts. At the end,
each gang's PodGroup as `kubectl get podgroups -A` shows it.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from certs.generate import generate
from controller.run import Controller
from gang import keys
from gang.config import Config
from kube.client import new_api_client
from kubenexus.local_webhook import LocalWebhook, register

NAMESPACE = "demo"
# The PodGroup CRD as shipped (deploy/base): the demo installs it, as `kubectl apply -k deploy/base` would.
PODGROUP_CRD = Path(__file__).resolve().parent.parent / "deploy" / "base" / "podgroup-crd.yaml"
WEBHOOK_IDENTITY = "system:serviceaccount:kubenexus-system:kubenexus-webhook"
CONTROLLER_IDENTITY = "system:serviceaccount:kubenexus-system:kubenexus-controller"


def workloads() -> list[dict[str, Any]]:
    spark = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
             "metadata": {"name": "spark-pi", "annotations": {keys.GANG_SCHEDULING: "true"}},
             "spec": {"type": "Scala", "mode": "cluster", "image": "spark:3.5.3",
                      "mainClass": "org.apache.spark.examples.SparkPi",
                      "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                      "driver": {"cores": 1, "memory": "1g"},
                      "executor": {"instances": 4, "cores": 2, "memory": "4g"}}}
    replica = _gpus(1)
    pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
               "metadata": {"name": "resnet", "annotations": {keys.GANG_SCHEDULING: "true"}},
               "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, **replica},
                                                "Worker": {"replicas": 3, **replica}}}}
    bert = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
             "metadata": {"name": "bert", "annotations": {keys.GANG_SCHEDULING: "true"}},
             "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, **_gpus(2)},
                                              "Worker": {"replicas": 3, **_gpus(2)}}}}
    giant = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
             "metadata": {"name": "giant", "annotations": {keys.GANG_SCHEDULING: "true"}},
             "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, **_gpus(8)},
                                              "Worker": {"replicas": 1, **_gpus(8)}}}}
    adhoc = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
             "metadata": {"name": "adhoc-report"},
             "spec": {"type": "Python", "mode": "cluster", "image": "spark:3.5.3",
                      "mainApplicationFile": "local:///opt/report.py",
                      "driver": {"cores": 1, "memory": "1g"}, "executor": {"instances": 1, "cores": 1,
                                                                          "memory": "2g"}}}
    return [spark, pytorch, bert, giant, adhoc]


def _gpus(count: int) -> dict[str, Any]:
    return {"restartPolicy": "OnFailure", "template": {"spec": {"containers": [{
        "name": "pytorch", "image": "pytorch:2.5",
        "resources": {"limits": {"nvidia.com/gpu": str(count)}, "requests": {"cpu": "2", "memory": "8Gi"}}}]}}}


class Timeline:
    """Prints events as they happen, relative to the start of the demo."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.lock = threading.Lock()

    def say(self, text: str) -> None:
        with self.lock:
            print(f"[{time.monotonic() - self.start:6.2f}s] {text}", flush=True)


def _describe(pod: Any) -> str:
    labels = pod.metadata.labels or {}
    gates = [g.name for g in pod.spec.scheduling_gates or []]
    owner = next((f"{r.kind}/{r.name}" for r in pod.metadata.owner_references or [] if r.controller), "no owner")
    if gates:
        return (f"pod {pod.metadata.name} (owner {owner}) created GATED: gang "
                f"{labels.get(keys.POD_GROUP_LABEL)} of {labels.get(keys.POD_GROUP_MIN_LABEL)}, "
                f"schedulerName {pod.spec.scheduler_name}")
    return f"pod {pod.metadata.name} (owner {owner}) created, not gated (schedulerName {pod.spec.scheduler_name})"


def _watch_pods(core: Any, timeline: Timeline, stop: threading.Event, seen: dict[str, str]) -> None:
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_pod, NAMESPACE, timeout_seconds=60):
        pod = event["object"]
        phase = pod.status.phase if pod.status else ""
        previous = seen.get(pod.metadata.name)
        if event["type"] == "ADDED" and previous is None:
            timeline.say(_describe(pod))
        elif pod.spec.node_name and previous in ("", "Pending") and phase == "Running":
            timeline.say(f"pod {pod.metadata.name} is Running on {pod.spec.node_name}")
        seen[pod.metadata.name] = phase or ""
        if stop.is_set():
            stream.stop()


def _watch_events(events: Any, timeline: Timeline, stop: threading.Event) -> None:
    """The controller's events (events.k8s.io/v1) on the jobs (those about waiting for room also go to up to 20 gated
    members). Read as plain JSON: an Event recorded through core/v1 has no eventTime, which the client's model
    requires."""
    stream = watch.Watch()
    for event in stream.stream(events.list_namespaced_event, NAMESPACE, timeout_seconds=120, deserialize=False):
        obj = event["object"]
        regarding = obj.get("regarding") or {}
        if event["type"] == "ADDED" and regarding.get("kind") != "Pod":
            timeline.say(f"  controller: {obj.get('reason')} on {regarding.get('kind')} {regarding.get('name')}: "
                         f"{obj.get('note')}")
        if stop.is_set():
            stream.stop()


def _finish(core: Any, job: str, timeline: Timeline) -> None:
    """The job's pods complete (the local kubelet runs pods until told otherwise)."""
    done = {"status": {"phase": "Succeeded"}}
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"training.kubeflow.org/job-name={job}").items
    for pod in pods:
        core.patch_namespaced_pod_status(pod.metadata.name, NAMESPACE, done)
    timeline.say(f"PyTorchJob {job} finished: its {len(pods)} pods Succeeded, their GPUs are free")


def install_podgroup_crd(api_client: Any) -> bool:
    """The PodGroup CRD of deploy/base; False when this installation has no deploy/ directory (a wheel)."""
    if not PODGROUP_CRD.exists():
        return False
    import yaml

    client.ApiextensionsV1Api(api_client).create_custom_resource_definition(yaml.safe_load(PODGROUP_CRD.read_text()))
    return True


def _age(created: str | None, now: float) -> str:
    """kubectl's AGE (apimachinery's HumanDuration)."""
    if not created:
        return "<unknown>"
    seconds = max(int(now - datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()), 0)
    minutes, hours = seconds // 60, seconds // 3600
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    return f"{hours // 24}d"


def podgroup_table(groups: list[dict[str, Any]], now: float) -> str:
    """``kubectl get podgroups -A`` as the CRD's printer columns make it (NAMESPACE, NAME, PHASE, MIN, PRESENT,
    RUNNING, WAITING-FOR, AGE), from the objects."""
    rows = [["NAMESPACE", "NAME", "PHASE", "MIN", "PRESENT", "RUNNING", "WAITING-FOR", "AGE"]]
    for group in sorted(groups, key=lambda g: (g["metadata"].get("namespace", ""), g["metadata"]["name"])):
        status, spec, meta = group.get("status") or {}, group.get("spec") or {}, group["metadata"]
        rows.append([meta.get("namespace", ""), meta["name"], str(status.get("phase", "")),
                     str(spec.get("minMember", "")), str(status.get("present", "")), str(status.get("running", "")),
                     str(status.get("waitingFor", "")), _age(meta.get("creationTimestamp"), now)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def _decisions(log_path: Path, offset: int, timeline: Timeline) -> int:
    with open(log_path, encoding="utf-8") as handle:
        handle.seek(offset)
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == "pod admitted" and entry.get("namespace") == NAMESPACE:
                why = "; ".join(entry.get("reasons") or [])
                timeline.say(f"  webhook: {entry.get('pod')} -> {entry.get('action')}: {why}")
                for warning in entry.get("warnings") or []:
                    timeline.say(f"  webhook warning: {warning}")
        return handle.tell()


def run(args: argparse.Namespace) -> int:
    timeline = Timeline()
    from cluster.local import LocalCluster, NodeSpec  # the emulator loads only for the demo

    nodes: list[NodeSpec | dict[str, Any]] = [NodeSpec(f"cpu-{i}", cpu="8", memory="32Gi") for i in range(2)]
    nodes += [
        NodeSpec(f"gpu-{i}", cpu="16", memory="64Gi", extra=(("nvidia.com/gpu", "4"),)) for i in range(2)]
    with LocalCluster(nodes) as cluster:
        cluster.run_components()
        timeline.say(f"local cluster up at {cluster.http.url}: {len(nodes)} nodes, scheduler, kubelet, operators")
        workdir = Path(cluster.workdir)
        tls = generate("kubenexus-webhook", "kubenexus-system", str(workdir / "webhook-certs"),
                       extra_ips=["127.0.0.1"])
        # Debug level: the demo shows the decision for every pod, including those left alone.
        webhook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY), {"logLevel": "DEBUG"})
        gate_controller = None
        try:
            webhook.wait_ready()
            kube = config.new_client_from_config(cluster.kubeconfig)
            podgroups = install_podgroup_crd(kube)
            register(client.AdmissionregistrationV1Api(kube), webhook)
            timeline.say(f"kubenexus webhook serving at {webhook.url}, registered for pod CREATE/UPDATE")
            gate_controller = Controller(new_api_client(cluster.add_user(CONTROLLER_IDENTITY), 32, 3), Config()).start()
            timeline.say("gate controller started: watches pods and nodes, releases a gang when all of it fits")
            core = client.CoreV1Api(kube)
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
            seen: dict[str, str] = {}
            stop = threading.Event()
            watcher = threading.Thread(target=_watch_pods, args=(core, timeline, stop, seen), daemon=True)
            watcher.start()
            threading.Thread(target=_watch_events, args=(client.EventsV1Api(kube), timeline, stop),
                             daemon=True).start()
            custom = client.CustomObjectsApi(kube)
            for obj in workloads():
                group, version = obj["apiVersion"].split("/")
                plural = obj["kind"].lower() + "s"
                custom.create_namespaced_custom_object(group, version, NAMESPACE, plural, obj)
                opted = keys.GANG_SCHEDULING in obj["metadata"].get("annotations", {})
                timeline.say(f"submitted {obj['kind']} {obj['metadata']['name']}"
                             + (" (kubenexus.io/gang-scheduling: \"true\")" if opted else " (no opt-in)"))
            offset, start = 0, time.monotonic()
            finished = False
            while time.monotonic() < start + args.seconds:
                offset = _decisions(webhook.log_path, offset, timeline)
                if not finished and time.monotonic() > start + args.seconds / 2:
                    _finish(core, "resnet", timeline)
                    finished = True
                time.sleep(0.2)
            stop.set()
            _decisions(webhook.log_path, offset, timeline)
            pods = [pod.to_dict() for pod in core.list_namespaced_pod(NAMESPACE).items]
            gated = [p["metadata"]["name"] for p in pods if p["spec"].get("scheduling_gates")]
            running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
            print()
            print(f"{len(pods)} pods: {len(gated)} held by the gang gate, {len(running)} running.")
            print("Each gang started whole or not at all: bert waited for resnet's GPUs and started when they were "
                  "free; giant can never fit (no node has 8 GPUs) and blocks no one; the job that did not opt in "
                  "was scheduled as usual. Ask why a gang waits with `kubenexus simulate` on a snapshot, or read "
                  "the events above with `kubectl describe`.")
            if podgroups:
                listed: Any = client.CustomObjectsApi(kube).list_cluster_custom_object(
                    keys.PODGROUP_GROUP, keys.PODGROUP_VERSION, keys.PODGROUP_PLURAL)
                groups: list[dict[str, Any]] = listed["items"]
                print()
                print("Each gang's PodGroup, kept by the gate controller:")
                print("$ kubectl get podgroups -A")
                print(podgroup_table(groups, time.time()))
        finally:
            if gate_controller is not None:
                gate_controller.stop()
            webhook.stop()
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="show gang admission on the embedded local cluster")
    parser.add_argument("--seconds", type=float, default=16.0, help="how long to let the operators work")
    parser.set_defaults(func=run)
