"""Gang members on the local cluster as the tests see them: their state (gated, planned, running), the events
about them, a PyTorchJob to make them, waiting for them and deleting them."""

from __future__ import annotations

import json
from collections.abc import Callable

from kubernetes.client import ApiException

from cluster.local import NodeSpec
from tests.support.contract import GATE, PLANNED_NODE
from tests.support.events import about, list_events
from tests.support.kube import Kube
from tests.support.polling import wait_for
from tests.support.roots import IMAGE, OPTED_IN, Obj

TIMEOUT = 20.0  # every bounded wait
GPU = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
# Two pools where capacity decides: three CPU nodes of 4 cpu (pool=cpu) and two GPU nodes of 4 GPUs, tainted.
CPU_NODES = [f"cpu-{i}" for i in range(3)]
GPU_NODES = [f"gpu-{i}" for i in range(2)]
TWO_POOLS = [NodeSpec(n, cpu="4", memory="16Gi", labels=(("pool", "cpu"),)) for n in CPU_NODES] + [
    NodeSpec(n, cpu="8", memory="32Gi", extra=((GPU, "4"),), labels=(("pool", "gpu"),), taints=(GPU_TAINT,))
    for n in GPU_NODES]
# The root kinds these modules' tests create, deleted between tests: (group, version, plural).
ROOTS = [("kubeflow.org", "v1", "pytorchjobs"), ("sparkoperator.k8s.io", "v1beta2", "sparkapplications")]
JOB_NAME = "training.kubeflow.org/job-name"
LEASE = ("kubenexus-system", "kubenexus-controller")  # the controller's Lease (namespace, name)


def torch_job(name: str, workers: int, cpu: str, memory: str = "256Mi", gpus: int = 0) -> Obj:
    """An opted-in PyTorchJob: 1 master + ``workers`` workers, every pod requesting the same."""
    requests: Obj = {"cpu": cpu, "memory": memory}
    resources: Obj = {"requests": requests}
    spec: Obj = {"containers": [{"name": "pytorch", "image": IMAGE, "resources": resources}]}
    if gpus:
        requests[GPU] = str(gpus)
        resources["limits"] = {GPU: str(gpus)}  # extended resources: limits = requests
        spec.update(tolerations=[GPU_TOLERATION], nodeSelector={"pool": "gpu"})
    else:
        spec["nodeSelector"] = {"pool": "cpu"}

    def replica(count: int) -> Obj:
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": json.loads(json.dumps(spec))}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "annotations": dict(OPTED_IN)},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}}


def name_of(pod: Obj) -> str:
    return str(pod["metadata"]["name"])


def gated(pod: Obj) -> bool:
    return GATE in [g.get("name") for g in pod["spec"].get("schedulingGates") or []]


def running(pod: Obj) -> bool:
    return bool(pod["spec"].get("nodeName")) and (pod.get("status") or {}).get("phase") == "Running"


def planned(pod: Obj) -> str | None:
    return (pod["metadata"].get("annotations") or {}).get(PLANNED_NODE)


def events(kube: Kube, ns: str, kind: str, name: str, reason: str) -> list[str]:
    """The notes of the events.k8s.io/v1 Events with ``reason`` regarding ``kind``/``name``, oldest first."""
    return [e.get("note", "") for e in about(list_events(kube.api_client, ns), kind, name, reason)]


def all_events(kube: Kube, ns: str) -> list[tuple[str, str, str, str]]:
    return [(e["regarding"].get("kind"), e["regarding"].get("name"), e.get("reason"), e.get("note"))
            for e in list_events(kube.api_client, ns)]


def wait_event(kube: Kube, ns: str, kind: str, name: str, reason: str) -> list[str]:
    return wait_for(lambda: events(kube, ns, kind, name, reason), TIMEOUT,
                    lambda: f"a {reason} event on {kind} {name}; events: {all_events(kube, ns)}")


def describe(pods: list[Obj]) -> list[tuple[str, str, str | None, bool]]:
    return [(name_of(p), (p.get("status") or {}).get("phase", "Pending"), p["spec"].get("nodeName"), gated(p))
            for p in pods]


def wait_pods(kube: Kube, ns: str, check: Callable[[list[Obj]], bool], what: str, selector: str = "") -> list[Obj]:
    """The pods of ``ns`` (matching ``selector``) once ``check`` holds for them; fails with what it last saw."""
    seen: list[Obj] = []

    def done() -> bool:
        nonlocal seen
        seen = kube.pods(ns, selector)
        return check(seen)

    wait_for(done, TIMEOUT, lambda: f"{what}; pods: {describe(seen)}")
    return seen


def delete_pods(kube: Kube, ns: str) -> None:
    """Delete every pod of ``ns`` at once and wait until they are gone (a test's nodes empty for the next one)."""

    def gone() -> bool:
        pods = kube.pods(ns)
        for pod in pods:
            try:
                kube.core.delete_namespaced_pod(name_of(pod), ns, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return not pods

    wait_for(gone, TIMEOUT, f"the pods of {ns} to be gone")
