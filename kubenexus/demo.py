"""``kubenexus demo``: gang admission and release on the embedded local cluster, as a timeline.

Starts the local cluster (apiserver, scheduler, kubelet, operators) with the product installed and running
(``kubenexus/local_product.py``, as ``kubenexus cluster serve`` has it), and submits: a Spark
application, two PyTorchJobs that compete for the same GPUs, one that can never fit, and a job
that did not opt in. It tells what happens, in lines of at most 100 characters: every pod with the webhook's
decision about it, the controller's events, each term explained where it first matters; halfway through, the
first GPU job finishes and the waiting one starts. At the end, each gang's PodGroup as `kubectl get podgroups -A`
shows it, a closing table per gang (pods submitted, released, running; how long it waited) and, with
``--timeline FILE``, the timeline picture (``kubenexus/timeline.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from gang import keys
from kubenexus import timeline as gang_timeline
from kubenexus.local_product import LocalProduct, controller_events, stop_on_signal

NAMESPACE = "demo"


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


WIDTH = 100  # no line of the story is longer
PAIRING = 5.0  # seconds a pod's line waits for the webhook's decision about it (and what came after, with it)
INDENT = " " * 10  # under the "[  1.23s] " stamp

#: The words the story uses, each explained once, in plain words, where it first matters.
GLOSSARY = {
    "opt-in": "a job opts in with the annotation kubenexus.io/gang-scheduling: \"true\" (or its namespace "
              "with a label); the webhook leaves every other pod alone.",
    "gang": "a gang is the set of pods of one job that are only useful together (a driver and its executors, "
            "a master and its workers): they start all together or not at all.",
    "gate": "gated: the webhook put a scheduling gate on the pod, a marker that keeps the Kubernetes "
            "scheduler from placing it until someone removes it.",
    "min-available": "min-available: how many members of the gang must be able to run at once.",
    "release": "released: the gate controller removed the gates of the gang's members, because all of them "
               "fit the cluster now, and pinned each to the node it planned for it.",
}


@dataclass
class _Entry:
    """Lines to print: the event, then (for a new pod) the webhook's decision, then the glossary's notes."""

    since: float
    lines: list[str]
    notes: list[str]
    awaiting: str | None = None  # the pod whose decision has not been read yet


class Story:
    """The demo's lines as they happen, relative to its start, at most WIDTH characters each.

    A pod's line waits up to PAIRING seconds for the webhook's decision about it (read from the webhook's log,
    which is written off the request thread), so that the two are printed together; lines that come after wait
    with it, so the story keeps its order.
    """

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.queue: list[_Entry] = []
        self.decisions: dict[str, list[str]] = {}  # pod -> the decision's lines, read before the pod was seen
        self.first: dict[tuple[str, ...], str] = {}  # a decision's action and reasons -> the first pod it was for
        self.explained: set[str] = set()
        self.closed = False  # the story is over: the watchers' late lines are dropped

    def lines(self, text: str) -> list[str]:
        """``text`` stamped and wrapped to WIDTH, continuation lines under the text."""
        stamp = f"[{time.monotonic() - self.start:6.2f}s] "
        return textwrap.wrap(text, WIDTH, initial_indent=stamp, subsequent_indent=INDENT + "  ",
                             break_on_hyphens=False)

    @staticmethod
    def part(text: str, label: str) -> list[str]:
        """``text`` under the line it belongs to (not stamped): ``label`` then the text, wrapped to WIDTH."""
        return textwrap.wrap(text, WIDTH, initial_indent=f"{INDENT}{label}: ",
                             subsequent_indent=INDENT + " " * (len(label) + 2), break_on_hyphens=False)

    def _notes(self, terms: tuple[str, ...]) -> list[str]:
        """The glossary's notes on ``terms`` not explained yet."""
        notes = []
        for term in terms:
            if term not in self.explained:
                self.explained.add(term)
                notes += self.part(GLOSSARY[term], "note")
        return notes

    def say(self, text: str, *terms: str) -> None:
        with self.lock:
            if self.closed:
                return
            self.queue.append(_Entry(time.monotonic(), self.lines(text), self._notes(terms)))
            self._flush(False)

    def pod(self, name: str, text: str, *terms: str) -> None:
        """A new pod's line, printed with the webhook's decision about it."""
        with self.lock:
            if self.closed:
                return
            decision = self.decisions.pop(name, None)
            self.queue.append(_Entry(time.monotonic(), self.lines(text) + (decision or []), self._notes(terms),
                                     None if decision else name))
            self._flush(False)

    def decision(self, pod: str, action: str, reasons: list[str], warnings: list[str]) -> None:
        """The webhook's decision about ``pod``: joins the pod's line, or waits for it."""
        with self.lock:
            if self.closed:
                return
            first = self.first.setdefault((action, *reasons), pod)
            text = (f"{action}: " + "; ".join(reasons) if first == pod
                    else f"{action}, for the same reasons as {first}")
            lines = self.part(text, "webhook") + [line for w in warnings for line in self.part(w, "warning")]
            entry = next((e for e in self.queue if e.awaiting == pod), None)
            if entry is None:
                self.decisions[pod] = lines
            else:
                entry.lines += lines
                entry.awaiting = None
            self._flush(False)

    def flush(self) -> None:
        with self.lock:
            self._flush(False)

    def close(self) -> None:
        """Print all that is left, and nothing after."""
        with self.lock:
            self._flush(True)
            self.closed = True

    def _flush(self, everything: bool) -> None:
        """Print the queue up to the first pod still awaiting its decision (not for longer than PAIRING)."""
        now = time.monotonic()
        while self.queue and (everything or self.queue[0].awaiting is None or now - self.queue[0].since > PAIRING):
            entry = self.queue.pop(0)
            print("\n".join(entry.lines + entry.notes), flush=True)
        if everything:
            for lines in self.decisions.values():  # decisions about pods never seen (refused, or gone at once)
                print("\n".join(lines), flush=True)
            self.decisions.clear()


def _describe(pod: Any) -> tuple[str, tuple[str, ...]]:
    """A new pod's line, and the words it introduces."""
    labels = pod.metadata.labels or {}
    gated = any(g.name == keys.GANG_GATE for g in pod.spec.scheduling_gates or [])
    owner = next((f"{r.kind}/{r.name}" for r in pod.metadata.owner_references or [] if r.controller), "no owner")
    if gated:
        return (f"pod {pod.metadata.name} ({owner}): gated, gang {labels.get(keys.POD_GROUP_LABEL)}, "
                f"min-available {labels.get(keys.POD_GROUP_MIN_LABEL)}", ("gang", "gate", "min-available"))
    return f"pod {pod.metadata.name} ({owner}): not gated, scheduled as usual", ()


def _watch_pods(core: Any, timeline: Story, stop: threading.Event, seen: dict[str, str]) -> None:
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_pod, NAMESPACE, timeout_seconds=60):
        pod = event["object"]
        phase = pod.status.phase if pod.status else ""
        previous = seen.get(pod.metadata.name)
        if event["type"] == "ADDED" and previous is None:
            text, terms = _describe(pod)
            timeline.pod(pod.metadata.name, text, *terms)
        elif pod.spec.node_name and previous in ("", "Pending") and phase == "Running":
            timeline.say(f"pod {pod.metadata.name} is Running on {pod.spec.node_name}")
        seen[pod.metadata.name] = phase or ""
        if stop.is_set():
            stream.stop()


def _watch_events(kube: Any, timeline: Story, stop: threading.Event) -> None:
    """The controller's events on the jobs (those about waiting for room also go to up to 20 gated members)."""
    for obj in controller_events(kube, NAMESPACE):
        regarding, reason = obj.get("regarding") or {}, obj.get("reason")
        timeline.say(f"  controller: {reason} on {regarding.get('kind')} {regarding.get('name')}: {obj.get('note')}",
                     *(("release",) if reason == gang_timeline.RELEASED_REASON else ()))
        if stop.is_set():
            return


def _released(core: Any, job: str, stop: threading.Event, timeout: float = 30.0) -> None:
    """Wait (at most ``timeout`` s) until the training job's four members exist and none is gated: on a loaded
    machine its operator may otherwise create the next job's pods first, and the story told would not be the one
    that happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.is_set():
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"training.kubeflow.org/job-name={job}").items
        if len(pods) == 4 and not any(g.name == keys.GANG_GATE for p in pods for g in p.spec.scheduling_gates or []):
            return
        time.sleep(0.05)


def _finish(core: Any, job: str, timeline: Story) -> None:
    """The job's pods complete, their status written as a kubelet writes it (the local kubelet runs pods until told
    otherwise): containers terminated with their start and end, not ready."""
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"training.kubeflow.org/job-name={job}").items
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for pod in pods:
        status = core.api_client.sanitize_for_serialization(pod.status)
        for container in status.get("containerStatuses") or []:
            started = ((container.get("state") or {}).get("running") or {}).get("startedAt", now)
            container.update(ready=False, state={"terminated": {"exitCode": 0, "reason": "Completed",
                                                                "startedAt": started, "finishedAt": now}})
        for condition in status.get("conditions") or []:
            if condition["type"] in ("Ready", "ContainersReady"):
                condition.update(status="False", reason="PodCompleted", lastTransitionTime=now)
        status["phase"] = "Succeeded"
        core.patch_namespaced_pod_status(pod.metadata.name, NAMESPACE, {"status": status})
    timeline.say(f"PyTorchJob {job} finished: its {len(pods)} pods Succeeded, their GPUs are free")


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


def podgroup_table(groups: Sequence[Mapping[str, Any]], now: float) -> str:
    """``kubectl get podgroups -A`` as the CRD's printer columns make it (NAMESPACE, NAME, PHASE, MIN, PRESENT,
    RUNNING, WAITING-FOR, AGE), from the objects."""
    rows = [["NAMESPACE", "NAME", "PHASE", "MIN", "PRESENT", "RUNNING", "WAITING-FOR", "AGE"]]
    for group in sorted(groups, key=lambda g: (g["metadata"].get("namespace", ""), g["metadata"]["name"])):
        status, spec, meta = group.get("status") or {}, group.get("spec") or {}, group["metadata"]
        rows.append([meta.get("namespace", ""), meta["name"], str(status.get("phase", "")),
                     str(spec.get("minMember", "")), str(status.get("present", "")), str(status.get("running", "")),
                     str(status.get("waitingFor", "")), _age(meta.get("creationTimestamp"), now)])
    return _table(rows)


def _decisions(log_path: Path, offset: int, timeline: Story) -> int:
    """The webhook's decisions about the demo's pods, from its JSON log past ``offset``; the new offset."""
    with open(log_path, encoding="utf-8") as handle:
        handle.seek(offset)
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == "pod admitted" and entry.get("namespace") == NAMESPACE:
                timeline.decision(entry.get("pod", ""), entry.get("action", ""), entry.get("reasons") or [],
                               entry.get("warnings") or [])
        return handle.tell()


def _table(rows: list[list[str]]) -> str:
    """Left-aligned columns, three spaces apart, as kubectl prints them."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def gang_table(gangs: list[gang_timeline.Gang], now: float) -> str:
    """The closing table: per gang its PodGroup's phase, its pods submitted, the longest wait of a member for its
    release (whole seconds, as creation times are; "+": some member still waits), its pods released and running."""
    rows = [["GANG", "PHASE", "SUBMITTED", "WAITED (s)", "RELEASED", "RUNNING"]]
    for gang in gangs:
        waited, waiting = gang.waited(now)
        rows.append([gang.name, gang.phase or "-", str(len(gang.members)), f"{waited:.0f}{'+' if waiting else ''}",
                     str(gang.released), str(gang.running)])
    return _table(rows)


def finale(kube: Any, story: Story, args: argparse.Namespace) -> None:
    """How it ended, from the cluster: the pods, each gang's PodGroup, the closing table, and the timeline picture
    (with ``--timeline``)."""
    story.close()
    now = time.time()
    pods, events, groups = gang_timeline.collect(kube, NAMESPACE)
    gangs = gang_timeline.gangs(pods, events, groups)
    gated = [p for p in pods if any(g.get("name") == keys.GANG_GATE for g in p["spec"].get("schedulingGates") or [])]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    print()
    print(f"{len(pods)} pods: {len(gated)} held by the gang gate, {len(running)} running.")
    print(textwrap.fill(
        "Each gang started whole or not at all: bert waited for resnet's GPUs and started when they were free; "
        "giant can never fit (no node has 8 GPUs) and blocks no one; the job that did not opt in was scheduled as "
        "usual. Ask why a gang waits with `kubenexus simulate` on a snapshot, or read the events above with "
        "`kubectl describe`.", WIDTH))
    if groups:
        print()
        print("Each gang's PodGroup, kept by the gate controller:")
        print("$ kubectl get podgroups -A")
        print(podgroup_table(groups, now))
    print()
    print("Each gang, from its pods and the controller's events: pods SUBMITTED, RELEASED and RUNNING, and")
    print("how long its longest-waiting member WAITED for its release (+: still waiting; the API keeps a")
    print("pod's creation time in whole seconds):")
    print(gang_table(gangs, now))
    if args.timeline:
        gang_timeline.draw(args.timeline, gangs, now, f"namespace {NAMESPACE}")
        print()
        print("The timeline picture (open it in a browser):")  # the path on a line of its own: it cannot wrap
        print(f"{INDENT}{args.timeline}")
        print(f"`kubenexus timeline -n {NAMESPACE} FILE` draws it for any cluster.")


def run(args: argparse.Namespace) -> int:
    timeline = Story()
    from cluster.local import LocalCluster, NodeSpec  # the emulator loads only for the demo

    nodes: list[NodeSpec | dict[str, Any]] = [NodeSpec(f"cpu-{i}", cpu="8", memory="32Gi") for i in range(2)]
    nodes += [
        NodeSpec(f"gpu-{i}", cpu="16", memory="64Gi", extra=(("nvidia.com/gpu", "4"),)) for i in range(2)]
    with LocalCluster(nodes) as cluster:
        cluster.run_components()
        timeline.say(f"local cluster up at {cluster.http.url}: {len(nodes)} nodes, scheduler, kubelet, operators")
        # Debug level: the demo shows the decision for every pod, including those left alone.
        product = LocalProduct(cluster, {"logLevel": "DEBUG"}).start()
        try:
            webhook = product.webhook
            assert webhook is not None
            kube = config.new_client_from_config(cluster.kubeconfig)
            timeline.say(f"kubenexus webhook serving at {webhook.url}, registered for pod CREATE/UPDATE")
            timeline.say("gate controller started: watches pods and nodes, releases a gang when all of it fits")
            core = client.CoreV1Api(kube)
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
            seen: dict[str, str] = {}
            stop = threading.Event()
            watcher = threading.Thread(target=_watch_pods, args=(core, timeline, stop, seen), daemon=True)
            watcher.start()
            threading.Thread(target=_watch_events, args=(kube, timeline, stop), daemon=True).start()
            custom = client.CustomObjectsApi(kube)
            for obj in workloads():
                group, version = obj["apiVersion"].split("/")
                plural = obj["kind"].lower() + "s"
                custom.create_namespaced_custom_object(group, version, NAMESPACE, plural, obj)
                opted = keys.GANG_SCHEDULING in obj["metadata"].get("annotations", {})
                timeline.say(f"submitted {obj['kind']} {obj['metadata']['name']}"
                             + (" (kubenexus.io/gang-scheduling: \"true\")" if opted else " (no opt-in)"),
                             *(("opt-in",) if opted else ()))
                if obj["metadata"]["name"] == "resnet":  # the story: bert comes once resnet holds the GPUs
                    _released(core, "resnet", stop)
            offset, start = 0, time.monotonic()
            finished = False
            while time.monotonic() < start + args.seconds:
                offset = _decisions(webhook.log_path, offset, timeline)
                if not finished and time.monotonic() > start + args.seconds / 2:
                    _finish(core, "resnet", timeline)
                    finished = True
                timeline.flush()
                time.sleep(0.1)
            stop.set()
            _decisions(webhook.log_path, offset, timeline)
            finale(kube, timeline, args)
            if args.keep:
                print(f"\nThe cluster keeps running (Ctrl-C stops it). In another terminal:\n"
                      f"  export KUBECONFIG={cluster.kubeconfig}\n  kubectl get pods -n {NAMESPACE}", flush=True)
                stop_on_signal().wait()
        finally:
            product.stop()
    return 0


def _seconds(text: str) -> float:
    """--seconds: a positive, finite number (the story needs time to happen)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="show gang admission on the embedded local cluster")
    parser.add_argument("--seconds", type=_seconds, default=16.0, help="how long to let the operators work")
    parser.add_argument("--timeline", metavar="FILE", help="also draw each gang's timeline into FILE (HTML/SVG)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the cluster, webhook and controller running afterwards, until Ctrl-C")
    parser.set_defaults(func=run)
