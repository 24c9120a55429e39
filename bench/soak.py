"""Soak: the product under contention and faults on the local cluster. Does every gang end whole or not at all?

``make soak`` (5 minutes) and ``--smoke`` (in ``make test``). One local cluster (apiserver, default scheduler
for every scheduler name, kubelets whose pods finish after a while, every operator), two ``kubenexus webhook``
replicas behind a TCP balancer that, like a Service, sends connections only to replicas whose ``/readyz``
answers, registered with the shipped webhook configurations (``deploy/base``: ``Fail`` for namespaces labelled
``enabled``, ``Ignore`` elsewhere), and two ``kubenexus controller`` replicas with leader election, all as
their own processes started the way a user starts them. For a fixed time it submits a mix of gang jobs
(SparkApplications with executors, PyTorchJobs, MPIJobs, JobSets) in opted-in namespaces, each followed within
0.3 s by ordinary pods of the default scheduler that compete for the same room, while a fault runs every few
seconds, in turn: a webhook replica killed and restarted, the controller leader killed (SIGKILL) and restarted,
a node's kubelet stopped (NotReady/unreachable) and restarted, the apiserver answering in 1.3-1.5 s, forty
stalled TLS clients on the webhook. Then it stops the load and the faults and lets the cluster settle.

It watches the store the whole time (in-process, every ``SAMPLE`` seconds) and reports:

- gangs submitted and gangs that started whole (every member bound at once);
- gangs stranded: a member released and not bound for longer than ``controller.bindTimeoutSeconds`` (plus the
  controller's resync slack) while a sibling runs (must be 0);
- escaped members left unrepaired: a pod of an opted-in job without its gang label, alive longer than
  ``ESCAPE_REPAIR`` (must be 0);
- node over-commitment: a sample where the requests of the pods bound to a node exceed its allocatable (must be 0);
- pods lost: after settling, a job that neither finished nor failed (its operator's verdict) but lacks members and
  gets none (must be 0);
- time from a gang's last member appearing to the gang running whole (p50, p99), and the evictions that repaired
  the races (from the controllers' metrics).

The exit status is 1 when a must-be-0 figure is not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import selectors
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml  # noqa: E402
from kubernetes import client, config  # noqa: E402
from kubernetes.utils.quantity import parse_quantity  # noqa: E402

from certs.generate import generate  # noqa: E402
from cluster.local import LocalCluster, NodeSpec  # noqa: E402
from kubenexus.local_webhook import KUBENEXUS, LocalWebhook, free_port  # noqa: E402

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parent.parent
WEBHOOK_IDENTITY = "system:serviceaccount:kubenexus-system:kubenexus-webhook"
CONTROLLER_IDENTITY = "system:serviceaccount:kubenexus-system:kubenexus-controller"
PRODUCT_NAMESPACE = "kubenexus-system"
GROUP_LABEL = "pod-group.scheduling.kubenexus.io/name"  # the gang contract, spelled here as users read it
GATE = "scheduling.kubenexus.io/gang"
PLANNED = "scheduling.kubenexus.io/planned-node"
OPT_IN = "kubenexus.io/gang-scheduling"
BIND_TIMEOUT = 30.0  # controller.bindTimeoutSeconds as shipped
SLACK = 5.0  # the controller's resync (2 s) and a loaded machine: a stranded member is repaired within this
ESCAPE_REPAIR = 45.0  # an escaped pod is found at once and rechecked every 5 s; its deletion backs off to 40 s
SAMPLE = 0.2
NODES = 6
NODE_CPU = 8
RUN_SECONDS = 12.0  # a running pod succeeds after this long: capacity churns
ROOTS = {  # kind -> (group, version, plural)
    "SparkApplication": ("sparkoperator.k8s.io", "v1beta2", "sparkapplications"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
}


def log(text: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --- a Service in front of the webhook replicas ------------------------------------------------------------------


class Balancer:
    """A TCP proxy on loopback that spreads connections over the replicas whose ``/readyz`` answers 200, as a
    Service does over ready endpoints; TLS passes through to the replica."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._backends: list[int] = []
        self._ready: list[int] = []
        self._lock = threading.Lock()
        self._next = 0
        self._stop = threading.Event()
        for target in (self._accept, self._probe):
            threading.Thread(target=target, daemon=True).start()

    def set_backends(self, ports: list[int]) -> None:
        with self._lock:
            self._backends = list(ports)
            self._ready = [p for p in self._ready if p in ports]

    def _probe(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                backends = list(self._backends)
            ready = [port for port in backends if self._answers(port)]
            with self._lock:
                self._ready = [p for p in ready if p in self._backends]

    def _answers(self, port: int) -> bool:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=1.0,
                                        context=self._context) as response:
                return response.status == 200
        except OSError:
            return False

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            ready = list(self._ready)
            self._next += 1
            start = self._next
        upstream = None
        for i in range(len(ready)):
            try:
                upstream = socket.create_connection(("127.0.0.1", ready[(start + i) % len(ready)]), timeout=1.0)
                break
            except OSError:
                continue
        if upstream is None:  # no ready endpoint: the apiserver sees a refused connection
            conn.close()
            return
        upstream.settimeout(None)
        _pipe(conn, upstream)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    selector = selectors.DefaultSelector()
    selector.register(a, selectors.EVENT_READ, b)
    selector.register(b, selectors.EVENT_READ, a)
    try:
        while True:
            for key, _ in selector.select(timeout=120):
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                if not data:
                    return
                key.data.sendall(data)
    except OSError:
        return
    finally:
        selector.close()
        a.close()
        b.close()


def shipped_configurations(url: str, ca_bundle: str) -> list[Obj]:
    """deploy/base's webhook configurations, reaching the webhooks by URL (through the balancer)."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "webhookconfigurations.yaml").read_text()))
    for obj in docs:
        for hook in obj["webhooks"]:
            service = hook["clientConfig"].pop("service")
            hook["clientConfig"].update(url=f"{url}{service.get('path', '/')}", caBundle=ca_bundle)
    return docs


# --- the jobs ----------------------------------------------------------------------------------------------------


def _container(name: str, cpu: int) -> Obj:
    return {"name": name, "image": "registry.example.com/soak:1.0",
            "resources": {"requests": {"cpu": str(cpu), "memory": f"{cpu}Gi"}}}


def gang_job(kind: str, name: str, rng: random.Random, opted_in: bool) -> tuple[Obj, int]:
    """A root object of ``kind`` and the size of its gang (every pod it creates at the start)."""
    annotations = {OPT_IN: "true"} if opted_in else {}
    meta = {"name": name, "annotations": annotations}
    if kind == "SparkApplication":
        executors = rng.randint(2, 3)
        spec = {"type": "Scala", "mode": "cluster", "image": "spark:3.5.3", "mainClass": "Soak",
                "mainApplicationFile": "local:///opt/soak.jar", "driver": {"coreRequest": "1", "memory": "512m"},
                "executor": {"instances": executors, "coreRequest": str(rng.randint(1, 2)), "memory": "1g"},
                "sparkConf": {"spark.kubernetes.allocation.batch.delay": "200ms"},
                "restartPolicy": {"type": "OnFailure", "onFailureRetries": 5, "onFailureRetryInterval": 2,
                                  "onSubmissionFailureRetries": 5, "onSubmissionFailureRetryInterval": 2}}
        return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": spec}, \
            1 + executors
    if kind == "PyTorchJob":
        workers, cpu = rng.randint(1, 3), rng.randint(1, 3)

        def replica(count: int) -> Obj:
            return {"replicas": count, "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [_container("pytorch", cpu)]}}}

        spec = {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}
        return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": meta, "spec": spec}, 1 + workers
    if kind == "MPIJob":
        workers = rng.randint(2, 3)
        spec = {"slotsPerWorker": 1, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {"spec": {"containers": [_container("launcher", 1)]}}},
            "Worker": {"replicas": workers, "template": {"spec": {"containers": [_container("worker", 2)]}}}}}
        return {"apiVersion": "kubeflow.org/v2beta1", "kind": kind, "metadata": meta, "spec": spec}, 1 + workers
    replicas, parallelism = rng.randint(1, 2), 2
    template = {"spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 20,
                         "template": {"spec": {"restartPolicy": "Never",
                                               "containers": [_container("worker", rng.randint(1, 2))]}}}}
    spec = {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": template}]}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": kind, "metadata": meta, "spec": spec}, \
        replicas * parallelism


@dataclass
class Root:
    kind: str
    namespace: str
    name: str
    uid: str
    size: int
    submitted: float
    started: float | None = None  # every member bound at once (first seen)
    latency: float | None = None  # from the last member's appearance to ``started``
    stranded: bool = False


class Background:
    """A daemon thread running ``_run`` until ``stop()``; ``_stop`` is set then (wait on it, not on sleep)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Any:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        raise NotImplementedError


# --- watching the store -----------------------------------------------------------------------------------------


def _requests(pod: Obj) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {"pods": Decimal(1)}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for resource, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[resource] = total.get(resource, Decimal(0)) + parse_quantity(value)
    return total


@dataclass
class Observed:
    strands: dict[str, float] = field(default_factory=dict)  # pod uid -> released, unbound, sibling bound since
    escaped: dict[str, float] = field(default_factory=dict)  # pod uid -> without gang label since
    unrepaired: set[str] = field(default_factory=set)
    seen: dict[str, float] = field(default_factory=dict)  # pod uid -> first seen
    overcommits: list[str] = field(default_factory=list)
    samples: int = 0


class Monitor(Background):
    """Samples the store: what every submitted root's pods are doing, and every node's bound requests."""

    def __init__(self, cluster: LocalCluster, roots: dict[str, Root]) -> None:
        super().__init__()
        self.cluster, self.roots = cluster, roots
        self.observed = Observed()
        self._resources = {}
        for key, (group, version, plural) in {**ROOTS, "Pod": ("", "v1", "pods"), "Job": ("batch", "v1", "jobs"),
                                              "Node": ("", "v1", "nodes")}.items():
            self._resources[key] = cluster.registry.get(group, version, plural)
        self._lock = threading.Lock()

    def _items(self, key: str) -> list[Obj]:
        resource = self._resources.get(key) or self.cluster.registry.get(*(ROOTS.get(key) or ("", "v1", key)))
        self._resources[key] = resource
        return list(self.cluster.store.items(resource)) if resource is not None else []

    def members(self) -> dict[str, list[Obj]]:
        """Pods by submitted root uid, through their owner references (pods, Jobs and roots of the store)."""
        objects = {o["metadata"]["uid"]: o for key in ("Pod", "Job", *ROOTS) for o in self._items(key)}
        by_root: dict[str, list[Obj]] = {}
        for pod in self._items("Pod"):
            obj, hops = pod, 0
            while obj is not None and hops < 6 and obj["metadata"]["uid"] not in self.roots:
                refs = obj["metadata"].get("ownerReferences") or []
                ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
                obj, hops = (objects.get(ref["uid"]) if ref else None), hops + 1
            if obj is not None and obj["metadata"]["uid"] in self.roots and obj is not pod:
                by_root.setdefault(obj["metadata"]["uid"], []).append(pod)
        return by_root

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE):
            try:
                self.sample(time.monotonic())
            except Exception as exc:  # a sample of a store changing under it: the next one is consistent
                log(f"monitor: {type(exc).__name__}: {exc}")

    def sample(self, now: float) -> None:
        observed = self.observed
        with self._lock:
            observed.samples += 1
            pods = self._items("Pod")
            for pod in pods:
                observed.seen.setdefault(pod["metadata"]["uid"], now)
            self._nodes(pods)
            for uid, members in self.members().items():
                self._root(self.roots[uid], members, now)

    def _nodes(self, pods: list[Obj]) -> None:
        used: dict[str, dict[str, Decimal]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                total = used.setdefault(node, {})
                for resource, value in _requests(pod).items():
                    total[resource] = total.get(resource, Decimal(0)) + value
        for node in self._items("Node"):
            name = node["metadata"]["name"]
            allocatable = {r: parse_quantity(v) for r, v in (node.get("status") or {}).get("allocatable", {}).items()}
            over = [r for r, v in used.get(name, {}).items() if v > allocatable.get(r, Decimal(0))]
            if over:
                self.observed.overcommits.append(f"{name}: {', '.join(over)}")

    def _root(self, root: Root, members: list[Obj], now: float) -> None:
        observed = self.observed
        live = [p for p in members if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        bound = [p for p in live if p["spec"].get("nodeName")]
        if root.started is None and len(bound) >= root.size:
            root.started = now
            root.latency = now - max(observed.seen[p["metadata"]["uid"]] for p in bound)
        for pod in live:
            uid = pod["metadata"]["uid"]
            labels = pod["metadata"].get("labels") or {}
            if GROUP_LABEL not in labels:
                since = observed.escaped.setdefault(uid, now)
                if now - since > ESCAPE_REPAIR:
                    observed.unrepaired.add(f"{root.namespace}/{pod['metadata']['name']}")
            gates = [g.get("name") for g in pod["spec"].get("schedulingGates") or []]
            released = GATE not in gates and PLANNED in (pod["metadata"].get("annotations") or {})
            if released and not pod["spec"].get("nodeName") and bound:
                since = observed.strands.setdefault(uid, now)
                if now - since > BIND_TIMEOUT + SLACK:
                    root.stranded = True
            else:
                observed.strands.pop(uid, None)


# --- the product's processes ----------------------------------------------------------------------------------------


class Webhooks:
    """``kubenexus webhook`` replicas behind the balancer."""

    def __init__(self, workdir: Path, tls: Any, kubeconfig: str, balancer: Balancer, count: int) -> None:
        self.workdir, self.tls, self.kubeconfig, self.balancer = workdir, tls, kubeconfig, balancer
        self.replicas: list[LocalWebhook] = []
        for _ in range(count):
            self.start()

    def start(self) -> None:
        hook = LocalWebhook(self.workdir, self.tls, self.kubeconfig, {})
        hook.wait_ready()
        self.replicas.append(hook)
        self.balancer.set_backends([r.port for r in self.replicas])

    def kill(self, count: int = 1) -> None:
        for hook in self.replicas[:count]:
            hook.process.send_signal(signal.SIGKILL)
            hook.stop()
        self.replicas = self.replicas[count:]
        self.balancer.set_backends([r.port for r in self.replicas])

    def stop(self) -> None:
        for hook in self.replicas:
            hook.stop()


class Controllers:
    """``kubenexus controller --leader-elect`` replicas; their metrics are scraped until they die."""

    def __init__(self, workdir: Path, kubeconfig: str, count: int) -> None:
        self.workdir, self.kubeconfig = workdir, kubeconfig
        self.config = workdir / "controller.yaml"
        self.config.write_text(yaml.safe_dump({"controller": {"bindTimeoutSeconds": BIND_TIMEOUT}}))
        self.replicas: dict[str, tuple[subprocess.Popen, int]] = {}
        self.counters: dict[str, dict[str, float]] = {}  # identity -> metric sample -> last value
        self._serial = 0
        for _ in range(count):
            self.start()

    def start(self) -> None:
        self._serial += 1
        identity, port = f"soak-{self._serial}", free_port()
        out = open(self.workdir / f"{identity}.log", "w")  # noqa: SIM115 (the process owns it until it ends)
        process = subprocess.Popen([KUBENEXUS, "controller", "--config", str(self.config), "--kubeconfig",
                                    self.kubeconfig, "--leader-elect", "--identity", identity, "--port", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT)
        self.replicas[identity] = (process, port)

    def scrape(self) -> None:
        for identity, (process, port) in list(self.replicas.items()):
            if process.poll() is not None:
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    text = response.read().decode()
            except OSError:
                continue
            samples = self.counters.setdefault(identity, {})
            for line in text.splitlines():
                if line.startswith("kubenexus_controller_") and "_total" in line and not line.startswith("#"):
                    name, _, value = line.rpartition(" ")
                    samples[name] = float(value)

    def kill_leader(self, cluster: LocalCluster) -> str:
        leases = cluster.registry.get("coordination.k8s.io", "v1", "leases")
        assert leases is not None
        holder = next((lease["spec"].get("holderIdentity") for lease in cluster.store.items(leases)
                       if lease["metadata"]["name"] == "kubenexus-controller"), None)
        if holder not in self.replicas:
            return "no leader to kill"
        self.scrape()
        process, _ = self.replicas.pop(holder)
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.start()
        return f"killed {holder}"

    def totals(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for samples in self.counters.values():
            for name, value in samples.items():
                total[name] = total.get(name, 0.0) + value
        return total

    def stop(self) -> None:
        self.scrape()
        for process, _ in self.replicas.values():
            process.terminate()
        for process, _ in self.replicas.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


# --- faults -------------------------------------------------------------------------------------------------------


def stalled_clients(port: int, count: int) -> list[socket.socket]:
    """TLS clients that send the first bytes of a ClientHello and then nothing."""
    hello = bytes.fromhex("16030100c8010000c40303") + os.urandom(16)
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        sock.sendall(hello)
        sockets.append(sock)
    return sockets


class Faults(Background):
    """One fault at a time, in turn, every ``interval`` seconds; each lasts ``hold`` seconds, then is undone."""

    def __init__(self, cluster: LocalCluster, webhooks: Webhooks, controllers: Controllers, balancer: Balancer,
                 interval: float, hold: float, rng: random.Random) -> None:
        super().__init__()
        self.cluster, self.webhooks, self.controllers, self.balancer = cluster, webhooks, controllers, balancer
        self.interval, self.hold, self.rng = interval, hold, rng
        self.done: dict[str, int] = {}
        self.schedule: list[tuple[str, Callable[[], None]]] = [
            ("webhook replica killed and restarted", self._webhook),
            ("controller leader killed (SIGKILL) and restarted", self._leader),
            ("node NotReady (container runtime down)", self._not_ready),
            ("apiserver answering in 1.3-1.5 s", self._slow),
            ("40 stalled TLS clients on the webhook", self._stalled),
            ("node unreachable (kubelet stopped)", self._unreachable),
            ("admission down (every webhook replica killed)", self._admission_down),
        ]

    def _run(self) -> None:
        turn = 0
        while not self._stop.wait(self.interval):
            name, fault = self.schedule[turn % len(self.schedule)]
            turn += 1
            log(f"fault: {name}")
            try:
                fault()
                self.done[name] = self.done.get(name, 0) + 1
            except Exception as exc:
                log(f"fault {name} failed: {type(exc).__name__}: {exc}")

    def _webhook(self) -> None:
        self.webhooks.kill(1)
        self.webhooks.start()

    def _leader(self) -> None:
        log(self.controllers.kill_leader(self.cluster))

    def _node(self) -> str:
        return f"soak-{self.rng.randrange(NODES)}"

    def _not_ready(self) -> None:
        node = self._node()
        self.cluster.set_runtime_ready(node, False)
        self._stop.wait(self.hold)
        self.cluster.set_runtime_ready(node, True)

    def _unreachable(self) -> None:
        node = self._node()
        self.cluster.stop_kubelet(node)
        self._stop.wait(self.hold)
        self.cluster.start_kubelet(node)

    def _slow(self) -> None:
        self.cluster.slow_down((1.3, 1.5))
        self._stop.wait(self.hold)
        self.cluster.slow_down(None)

    def _stalled(self) -> None:
        sockets = stalled_clients(self.balancer.port, 40)
        self._stop.wait(self.hold)
        for sock in sockets:
            sock.close()

    def _admission_down(self) -> None:
        count = len(self.webhooks.replicas)
        self.webhooks.kill(count)
        self._stop.wait(self.hold)
        for _ in range(count):
            self.webhooks.start()


# --- load -----------------------------------------------------------------------------------------------------------


class Load(Background):
    """Gang jobs in the opted-in namespaces, each followed within 0.3 s by ordinary pods that compete for its room."""

    def __init__(self, api: client.ApiClient, roots: dict[str, Root], namespaces: list[tuple[str, bool]],
                 interval: float, rng: random.Random) -> None:
        super().__init__()
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        self.roots, self.namespaces, self.interval, self.rng = roots, namespaces, interval, rng
        self.ordinary = 0
        self.refused = 0  # creates refused (admission down in a Fail namespace, a slow apiserver timing out)

    def _run(self) -> None:
        serial = 0
        while not self._stop.wait(self.interval * self.rng.uniform(0.5, 1.5)):
            serial += 1
            kind = self.rng.choice(list(ROOTS))
            namespace, by_label = self.rng.choice(self.namespaces)
            obj, size = gang_job(kind, f"{kind.lower()}-{serial}", self.rng, opted_in=not by_label)
            group, version, plural = ROOTS[kind]
            try:
                created = self.custom.create_namespaced_custom_object(group, version, namespace, plural, obj)
            except Exception as exc:
                self.refused += 1
                log(f"load: {kind} refused: {str(exc)[:120]}")
                continue
            uid = created["metadata"]["uid"]
            self.roots[uid] = Root(kind, namespace, obj["metadata"]["name"], uid, size, time.monotonic())
            for _ in range(self.rng.randint(1, 2)):
                self._stop.wait(self.rng.uniform(0.0, 0.15))
                self._ordinary(f"web-{serial}-{uuid.uuid4().hex[:5]}")

    def _ordinary(self, name: str) -> None:
        pod = {"metadata": {"name": name}, "spec": {"restartPolicy": "Never",
                                                    "containers": [_container("web", self.rng.randint(1, 2))]}}
        try:
            self.core.create_namespaced_pod("web", pod)
            self.ordinary += 1
        except Exception as exc:
            self.refused += 1
            log(f"load: ordinary pod refused: {str(exc)[:120]}")


# --- the verdict ---------------------------------------------------------------------------------------------------


FAILED_STATES = {"FAILED", "SUBMISSION_FAILED", "FAILING"}
DONE_STATES = {"COMPLETED", "SUCCEEDING"}


def verdict(cluster: LocalCluster, root: Root) -> str:
    """What the root's operator says of it: "failed" (it gave up: a verdict, not a loss), "finished", or ""."""
    resource = cluster.registry.get(*ROOTS[root.kind])
    obj = next((o for o in cluster.store.items(resource) if o["metadata"]["uid"] == root.uid), None) \
        if resource is not None else None
    status = (obj or {}).get("status") or {}
    state = (status.get("applicationState") or {}).get("state") or ""
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    if state in FAILED_STATES or "Failed" in true:
        return "failed"
    if state in DONE_STATES or true & {"Succeeded", "Complete", "Completed"}:
        return "finished"
    return ""


def settled(monitor: Monitor) -> tuple[bool, dict[str, str]]:
    """Whether every root has started whole, or waits whole (every present member gated), or was failed by its
    operator; and the state of each one that has not."""
    members = monitor.members()
    open_: dict[str, str] = {}
    for uid, root in monitor.roots.items():
        if root.started is not None or verdict(monitor.cluster, root):
            continue
        live = [p for p in members.get(uid, []) if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        gated = [p for p in live if GATE in [g.get("name") for g in p["spec"].get("schedulingGates") or []]]
        staged = root.kind == "SparkApplication"  # its executors come only once the driver runs
        if live and len(gated) == len(live) and (staged or len(live) == root.size):
            continue
        open_[f"{root.namespace}/{root.name}"] = f"{len(live)} live of {root.size}, {len(gated)} gated"
    return not open_, open_


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    nodes = [NodeSpec(f"soak-{i}", cpu=str(NODE_CPU), memory="32Gi") for i in range(NODES)]
    roots: dict[str, Root] = {}
    started = time.monotonic()
    with LocalCluster(nodes=nodes, workdir=str(workdir / "cluster")) as cluster:
        cluster.run_components(run_seconds=RUN_SECONDS)
        api = config.new_client_from_config(cluster.kubeconfig)
        core = client.CoreV1Api(api)
        namespaces = [("team-a", True), ("team-b", True), ("research", False)]  # (name, opted in by label)
        for name, labelled in [*namespaces, (PRODUCT_NAMESPACE, False), ("web", False)]:
            core.create_namespace({"metadata": {"name": name,
                                                "labels": {OPT_IN: "enabled"} if labelled else {}}})
        tls = generate("kubenexus-webhook", PRODUCT_NAMESPACE, str(workdir / "certs"), extra_dns=["localhost"],
                       extra_ips=["127.0.0.1"])
        balancer = Balancer(ssl.create_default_context(cafile=tls.ca_cert))
        webhooks = Webhooks(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY), balancer, 2)
        admission = client.AdmissionregistrationV1Api(api)
        for obj in shipped_configurations(f"https://127.0.0.1:{balancer.port}", tls.ca_bundle_b64()):
            if obj["kind"] == "MutatingWebhookConfiguration":
                admission.create_mutating_webhook_configuration(obj)
            else:
                admission.create_validating_webhook_configuration(obj)
        controllers = Controllers(workdir, cluster.add_user(CONTROLLER_IDENTITY), 2)
        monitor = Monitor(cluster, roots).start()
        faults = Faults(cluster, webhooks, controllers, balancer, args.fault_interval, args.fault_hold, rng)
        load = Load(api, roots, namespaces, args.submit_interval, rng)
        try:
            load.start()
            faults.start()
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                time.sleep(2.0)
                controllers.scrape()
            load.stop()
            faults.stop()
            log(f"load and faults stopped after {time.monotonic() - started:.0f} s; settling")
            settle_deadline = time.monotonic() + args.settle
            done, open_ = settled(monitor)
            while not done and time.monotonic() < settle_deadline:
                time.sleep(1.0)
                controllers.scrape()
                done, open_ = settled(monitor)
        finally:
            monitor.stop()
            controllers.stop()
            webhooks.stop()
            balancer.close()
        observed = monitor.observed
        latencies = [r.latency for r in roots.values() if r.latency is not None]
        failed = [r for r in roots.values() if r.started is None and verdict(cluster, r) == "failed"]
        finished = [r for r in roots.values() if r.started is None and verdict(cluster, r) == "finished"]
        totals = controllers.totals()
    return {
        "seconds": args.seconds, "seed": args.seed, "nodes": f"{NODES} x {NODE_CPU} cpu",
        "gangs submitted": len(roots),
        "by kind": {kind: sum(1 for r in roots.values() if r.kind == kind) for kind in ROOTS},
        "gangs started whole": sum(1 for r in roots.values() if r.started is not None),
        "gangs stranded longer than bindTimeoutSeconds": sorted(
            f"{r.namespace}/{r.name}" for r in roots.values() if r.stranded),
        "escaped members left unrepaired": sorted(observed.unrepaired),
        "node over-commitment samples": observed.overcommits[:20],
        "pods lost (jobs lacking members after settling)": open_,
        "jobs failed by their operator": sorted(f"{r.namespace}/{r.name}" for r in failed),
        # pods here finish after RUN_SECONDS whatever they do: a Spark driver may finish before its executors ran
        "jobs finished without running whole": sorted(f"{r.namespace}/{r.name}" for r in finished),
        "last member to start p50 s": round(percentile(latencies, 0.5), 2),
        "last member to start p99 s": round(percentile(latencies, 0.99), 2),
        "ordinary pods": load.ordinary, "creates refused or failed": load.refused,
        "faults": faults.done, "samples": observed.samples,
        "controller counters": {k: v for k, v in sorted(totals.items()) if v
                                and any(s in k for s in ("evictions", "escaped", "timeouts", "patch_errors"))},
    }


def race(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The race issue 10 reports, trial by trial: a 1 + 3 PyTorchJob (3 cpu each) on four 4-cpu nodes, and two
    2-cpu pods of the default scheduler created within the next 0.3 s (they leave no node room for a 3-cpu member
    of each: the gang cannot start while they run). Trials alternate between the shipped controller and one that
    does not wait for pods queued for other schedulers (``controller.queuedPodSeconds`` 1 ms), each a fresh
    ``kubenexus controller`` process. Per mode: trials in which the gang was released and then lost room to the
    ordinary pods (stranded, evicted by the controller), and trials that ended half started, 8 s after the job was
    created (must be 0)."""
    rng = random.Random(args.seed)
    nodes = [NodeSpec(f"race-{i}", cpu="4", memory="16Gi") for i in range(4)]
    modes = {"shipped (waits for queued pods)": 10.0, "without the queued-pod wait": 0.001}
    results = {mode: {"trials": 0, "stranded then evicted": 0, "ended half started": 0} for mode in modes}
    with LocalCluster(nodes=nodes, workdir=str(workdir / "race-cluster")) as cluster:
        cluster.run_components()
        api = config.new_client_from_config(cluster.kubeconfig)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for name in (PRODUCT_NAMESPACE, "web"):
            core.create_namespace({"metadata": {"name": name}})
        tls = generate("kubenexus-webhook", PRODUCT_NAMESPACE, str(workdir / "race-certs"), extra_dns=["localhost"],
                       extra_ips=["127.0.0.1"])
        hook = LocalWebhook(workdir, tls, cluster.add_user(WEBHOOK_IDENTITY), {})
        hook.wait_ready()
        admission = client.AdmissionregistrationV1Api(api)
        for obj in shipped_configurations(hook.url, tls.ca_bundle_b64()):
            if obj["kind"] == "MutatingWebhookConfiguration":
                admission.create_mutating_webhook_configuration(obj)
            else:
                admission.create_validating_webhook_configuration(obj)
        kubeconfig = cluster.add_user(CONTROLLER_IDENTITY)
        try:
            for trial in range(2 * args.race):
                mode = list(modes)[trial % 2]
                outcome = _race_trial(cluster, core, custom, workdir, kubeconfig, modes[mode], trial, rng)
                results[mode]["trials"] += 1
                results[mode]["stranded then evicted"] += outcome["evicted"]
                results[mode]["ended half started"] += outcome["half"]
        finally:
            hook.stop()
    return results


def _race_trial(cluster: LocalCluster, core: client.CoreV1Api, custom: client.CustomObjectsApi, workdir: Path,
                kubeconfig: str, queued_seconds: float, trial: int, rng: random.Random) -> dict[str, int]:
    settings = workdir / f"race-{trial}.yaml"
    settings.write_text(yaml.safe_dump({"controller": {"queuedPodSeconds": queued_seconds}}))
    port = free_port()
    with open(workdir / f"race-{trial}.log", "w") as out:
        process = subprocess.Popen([KUBENEXUS, "controller", "--config", str(settings), "--kubeconfig", kubeconfig,
                                    "--port", str(port)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _ready(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        namespace = f"race-{trial}"
        core.create_namespace({"metadata": {"name": namespace, "labels": {OPT_IN: "enabled"}}})
        job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "race"},
               "spec": {"pytorchReplicaSpecs": {role: {"replicas": count, "restartPolicy": "OnFailure", "template": {
                   "spec": {"containers": [_container("pytorch", 3)]}}} for role, count in (("Master", 1),
                                                                                            ("Worker", 3))}}}
        custom.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", job)
        made = time.monotonic()
        for i in range(2):
            time.sleep(max(0.0, made + rng.uniform(0.0, 0.3) - time.monotonic()))
            core.create_namespaced_pod("web", {"metadata": {"name": f"web-{trial}-{i}"}, "spec": {
                "containers": [{"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "2"}}}]}})
        time.sleep(8.0)  # the race is over within a second; a stranded gang is evicted at once
        members = [p for p in core.list_namespaced_pod(namespace).items if not p.metadata.deletion_timestamp]
        half = any(p.spec.node_name for p in members) and not all(p.spec.node_name for p in members)
        evicted = int(_counter(port, "kubenexus_controller_gang_evictions_total") > 0)
    finally:
        process.terminate()
        process.wait(10)
        custom.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "race")
        for pod in core.list_namespaced_pod("web").items + core.list_namespaced_pod(namespace).items:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    return {"evicted": evicted, "half": int(half)}


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def _counter(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        return sum(float(line.rpartition(" ")[2]) for line in response.read().decode().splitlines()
                   if line.startswith(name))


MUST_BE_EMPTY = ("gangs stranded longer than bindTimeoutSeconds", "escaped members left unrepaired",
                 "node over-commitment samples", "pods lost (jobs lacking members after settling)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300.0, help="how long load and faults run")
    parser.add_argument("--settle", type=float, default=120.0, help="how long the cluster may take to settle after")
    parser.add_argument("--submit-interval", type=float, default=2.0, help="mean seconds between gang jobs")
    parser.add_argument("--fault-interval", type=float, default=6.0, help="seconds between faults")
    parser.add_argument("--fault-hold", type=float, default=8.0, help="how long a fault lasts")
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument("--smoke", action="store_true", help="a short run for make test")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--keep", metavar="DIR", help="keep the logs of every process in DIR")
    parser.add_argument("--race", type=int, default=0, metavar="N",
                        help="instead of the soak: N trials per mode of the release/bind race (see race())")
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.settle, args.fault_interval, args.fault_hold = 45.0, 90.0, 3.0, 4.0
    work = race if args.race else run
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        result = work(args, Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="kubenexus-soak-") as tmp:
            result = work(args, Path(tmp))
    result["machine"] = f"{os.cpu_count()} cpu, {platform.platform()}, Python {platform.python_version()}"
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            shown = value if not isinstance(value, list | dict) or value else "none"
            print(f"{key:50} {shown}")
    broken = [f"{mode}: ended half started" for mode, row in result.items() if isinstance(row, dict)
              and row.get("ended half started")] if args.race else [key for key in MUST_BE_EMPTY if result[key]]
    if broken:
        print(f"soak: FAILED: {', '.join(broken)}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
