"""A whole local cluster in one process: apiserver over TLS, admission, scheduler, kubelets, kube-controller-manager's
garbage collectors (of owners, of pods), namespace, node lifecycle, taint eviction and disruption controllers, and the
operators.

Tests, ``kubenexus cluster serve`` and ``kubenexus demo`` start one of these; clients reach it
through the kubeconfig it writes, exactly as they would reach a real cluster. Faults for tests and benchmarks:
``stop_kubelet``/``start_kubelet`` (a node goes silent and comes back), ``set_runtime_ready`` (a kubelet reports
NotReady), ``slow_down`` (requests over HTTP answered late).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from cluster.admission import User
from cluster.apiserver import ApiServer
from cluster.crd_finalizer import CrdFinalizer
from cluster.defaults import NAMESPACE_NAME_LABEL
from cluster.gc import GarbageCollector
from cluster.http import ApiHttpServer, Latency, write_kubeconfig
from cluster.namespaces import NamespaceController
from cluster.pki import write_serving_files
from cluster.priority import GROUP, PLURAL, system_priority_classes
from cluster.resources import Registry
from cluster.store import ApiError, Store

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
#: What each node's kubelet reports about itself (``kubectl get nodes`` shows the VERSION, ``-o wide`` the rest).
NODE_INFO = {"kubeletVersion": "v1.31.0", "kubeProxyVersion": "", "operatingSystem": "linux",
             "architecture": "amd64", "osImage": "KubeNexus emulated node", "kernelVersion": "emulated",
             "containerRuntimeVersion": "emulated://1.0", "machineID": "", "systemUUID": "", "bootID": ""}
ADMIN = User("kubernetes-admin", ("system:masters", "system:authenticated"))


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpu: str = "8"
    memory: str = "32Gi"
    pods: str = "110"
    extra: tuple[tuple[str, str], ...] = ()  # extended resources, e.g. ("nvidia.com/gpu", "4")
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Any, ...] = ()
    unschedulable: bool = False

    def node(self) -> dict[str, Any]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods, **dict(self.extra)}
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", **dict(self.labels)}
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {"unschedulable": self.unschedulable, "taints": list(self.taints)},
            "status": {"capacity": capacity, "allocatable": dict(capacity),
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                       "nodeInfo": dict(NODE_INFO)},
        }


class LocalCluster:
    def __init__(self, nodes: list[NodeSpec | dict[str, Any]] | None = None, workdir: str | None = None,
                 history: int = 10000) -> None:
        self._own_workdir = workdir is None  # made here: removed by stop(), with the keys and tokens it holds
        self.workdir = workdir or tempfile.mkdtemp(prefix="kubenexus-cluster-")
        self.store = Store(history=history)
        self.registry = Registry()
        self.api = ApiServer(self.store, self.registry)
        self.audit = self.api.audit  # every request served: user, verb, group, resource, namespace, name
        tls = write_serving_files(os.path.join(self.workdir, "pki"))
        self.ca_cert = tls.ca_cert
        self.admin_token = secrets.token_hex(16)
        self.users: dict[str, User] = {self.admin_token: ADMIN}
        self.http = ApiHttpServer(self.api, tls.cert, tls.key, self.users)
        self.kubeconfig = write_kubeconfig(os.path.join(self.workdir, "kubeconfig"), self.http.url, tls.ca_cert,
                                           self.admin_token)
        # kube-controller-manager's garbage collector and namespace controller, the apiextensions-apiserver's CRD
        # finalizer: always there
        self.components: list[Any] = [GarbageCollector(self.api), NamespaceController(self.api), CrdFinalizer(self.api)]
        self._seed(nodes or [NodeSpec(f"node-{i}") for i in range(3)])

    def _seed(self, nodes: list[NodeSpec | dict[str, Any]]) -> None:
        namespaces = self.registry.get("", "v1", "namespaces")
        node_resource = self.registry.get("", "v1", "nodes")
        priority_classes = self.registry.get(GROUP, "v1", PLURAL)
        assert namespaces is not None and node_resource is not None and priority_classes is not None
        for name in SYSTEM_NAMESPACES:
            self.store.create(namespaces, {"metadata": {"name": name, "labels": {NAMESPACE_NAME_LABEL: name}},
                                           "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}},
                              None)
        for priority_class in system_priority_classes():  # the apiserver's post-start hook creates them
            self.store.create(priority_classes, priority_class, None)
        for node in nodes:
            self.store.create(node_resource, node.node() if isinstance(node, NodeSpec) else node, None)

    def add_user(self, username: str, groups: tuple[str, ...] | None = None) -> str:
        """A kubeconfig for another identity (e.g. the gate controller's service account).

        Without ``groups``, the groups the apiserver's authenticators give that user: a service account
        (``system:serviceaccount:<ns>:<name>``) is in system:serviceaccounts and system:serviceaccounts:<ns>.
        """
        if groups is None:
            groups = ("system:authenticated",)
            parts = username.split(":")
            if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
                groups = ("system:serviceaccounts", f"system:serviceaccounts:{parts[2]}", *groups)
        token = secrets.token_hex(16)
        self.users[token] = User(username, groups)
        safe = username.replace(":", "_")
        return write_kubeconfig(os.path.join(self.workdir, f"kubeconfig-{safe}"), self.http.url, self.ca_cert, token)

    def enforce_rbac(self, *usernames: str) -> None:
        """Authorize these users' requests with RBAC, from the Roles, ClusterRoles and bindings stored in the
        cluster (and the default discovery roles), as the apiserver's RBAC authorizer does; everybody else
        (the admin, the emulated scheduler, kubelet and operators) stays unchecked."""
        from cluster.rbac import StoreAuthorizer

        self.api.authorizer = StoreAuthorizer(self.store, self.registry, usernames)

    def run_components(self, scheduler_names: tuple[str, ...] = ("default-scheduler", "kubenexus-scheduler"),
                       start_seconds: float = 0.2, run_seconds: float | None = None,
                       operators: bool = True, node_monitor_grace_seconds: float = 40.0,
                       stop_seconds: float = 0.5, preemption: bool = False,
                       pod_gc_seconds: float = 20.0) -> None:
        """Start the scheduler, the kubelets, the node lifecycle, taint eviction and disruption controllers, the
        pod garbage collector (every ``pod_gc_seconds``, kube-controller-manager's 20 s) and (optionally) the
        operators; ``stop()`` ends them. (The garbage collector of owners and the namespace controller run from
        ``start()`` on.)

        Pods start ``start_seconds`` after they are bound, (with ``run_seconds``) succeed that long after, and take
        ``stop_seconds`` to stop once deleted. ``node_monitor_grace_seconds`` is kube-controller-manager's
        ``--node-monitor-grace-period`` (40 s in 1.31); the kubelets renew their leases every quarter of it, at
        most every 10 s, as the real ones (10 s against 40 s) do. ``preemption`` enables the scheduler's
        DefaultPreemption (``cluster/preemption.py``), as kube-scheduler's default profile has it; without it the
        scheduler runs a profile with no PostFilter plugin (pods wait, nothing is preempted).
        """
        from cluster.disruption import DisruptionController
        from cluster.kubelet import Kubelet
        from cluster.nodes import NodeLifecycleController, TaintEvictionController
        from cluster.podgc import PodGC
        from cluster.scheduler import Scheduler

        self.components.append(Scheduler(self.api, scheduler_names, preemption=preemption))
        self.components.append(Kubelet(self.api, start_seconds=start_seconds, run_seconds=run_seconds,
                                       lease_renew_seconds=min(10.0, node_monitor_grace_seconds / 4),
                                       stop_seconds=stop_seconds))
        self.components.append(NodeLifecycleController(self.api, grace_seconds=node_monitor_grace_seconds))
        self.components.append(TaintEvictionController(self.api))
        self.components.append(DisruptionController(self.api))
        self.components.append(PodGC(self.api, pod_gc_seconds))
        if operators:  # the operators' CRDs come with them, as a Helm chart would install them
            from cluster.controllers import Client
            from cluster.crds import crd_manifests
            from cluster.operators.table import start_operators

            admin = Client(self.api, ADMIN)
            for crd in crd_manifests():
                with contextlib.suppress(ApiError):  # already installed
                    admin.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            self.components.extend(start_operators(self.api))
        for component in self.components:
            if not component.is_alive():
                component.start()

    # --- faults ----------------------------------------------------------------------------

    def _kubelet(self) -> Any:
        from cluster.kubelet import Kubelet

        found = next((c for c in self.components if isinstance(c, Kubelet)), None)
        if found is None:
            raise RuntimeError("no kubelets: call run_components() first")
        return found

    def _node_name(self, node: str) -> str:
        nodes = self.registry.get("", "v1", "nodes")
        assert nodes is not None
        return self.store.get(nodes, None, node)["metadata"]["name"]  # 404 (ApiError) for an unknown node

    def stop_kubelet(self, node: str) -> None:
        """The node's kubelet stops: no heartbeats, no pod status, no pod starts or removals (a node down or
        cut off). After ``node_monitor_grace_seconds`` the node lifecycle controller marks it Unknown and taints
        it ``node.kubernetes.io/unreachable``."""
        self._kubelet().stop_node(self._node_name(node))

    def start_kubelet(self, node: str) -> None:
        """The node's kubelet is back: it heartbeats and posts Ready=True at once, and the taints go."""
        self._kubelet().start_node(self._node_name(node))

    def set_runtime_ready(self, node: str, ready: bool) -> None:
        """The node's kubelet keeps heartbeating but reports Ready=False (``KubeletNotReady``: its container
        runtime is down) and starts no pod; the node is tainted ``node.kubernetes.io/not-ready``."""
        self._kubelet().set_runtime_ready(self._node_name(node), ready)

    def slow_down(self, seconds: float | tuple[float, float] | None, users: tuple[str, ...] | None = None,
                  verbs: tuple[str, ...] | None = None, resources: tuple[str, ...] | None = None) -> None:
        """Delay every request served over HTTP by ``seconds`` (or uniformly within (low, high)), optionally only
        those of ``users`` (usernames), ``verbs`` or ``resources`` (plurals); ``None`` clears it. Takes effect for
        the next request, in that request's thread only."""
        if seconds is None:
            self.http.latency = None
            return
        low, high = seconds if isinstance(seconds, tuple) else (seconds, seconds)
        if not 0 <= low <= high:
            raise ValueError(f"expected 0 <= low <= high seconds, got {seconds!r}")
        self.http.latency = Latency(low, high, frozenset(users) if users is not None else None,
                                    frozenset(verbs) if verbs is not None else None,
                                    frozenset(resources) if resources is not None else None)

    def start(self) -> LocalCluster:
        """Serve the API, with the garbage collector, the namespace controller and the CRD finalizer running (a
        control plane never lacks them)."""
        self.http.start()
        for component in self.components:
            if not component.is_alive():
                component.start()
        return self

    def stop(self) -> None:
        """Stop serving and every component; a workdir made here (no ``workdir`` given) is removed: its serving
        key and the users' tokens open a cluster that no longer exists."""
        for component in self.components:
            component.stop()
        self.http.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
