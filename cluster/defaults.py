"""API defaulting: the fields the apiserver fills in when it decodes a request, before admission.

Webhooks see these values in a real cluster (e.g. ``schedulerName: default-scheduler``), so the
emulator sets them too. Only the defaults that matter to scheduling and to the operators are here.
"""

from __future__ import annotations

from typing import Any

from cluster.store import now

Obj = dict[str, Any]


def _container(container: Obj) -> None:
    image = str(container.get("image", ""))
    tagged = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
    container.setdefault("imagePullPolicy", "IfNotPresent" if tagged or "@" in image else "Always")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    resources = container["resources"]
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        requests = resources.setdefault("requests", {})
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)  # a limit without a request defaults the request


def _pod_spec(spec: Obj) -> None:
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _container(container)


def _qos(spec: Obj) -> str:
    containers = [c for key in ("containers", "initContainers") for c in spec.get(key) or [] if isinstance(c, dict)]
    requests = [(c.get("resources") or {}).get("requests") or {} for c in containers]
    limits = [(c.get("resources") or {}).get("limits") or {} for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(lim.get(r) and lim.get(r) == req.get(r) for req, lim in zip(requests, limits, strict=True)
                     for r in ("cpu", "memory"))
    return "Guaranteed" if guaranteed else "Burstable"


# The DefaultTolerationSeconds admission plugin (on by default): every pod created without a toleration of these
# NoExecute taints gets one for 300 s (--default-not-ready-toleration-seconds, --default-unreachable-...).
DEFAULT_TOLERATION_SECONDS = 300
_NODE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _default_tolerations(spec: Obj) -> None:
    given = spec.get("tolerations")
    tolerations: list[Any] = given if isinstance(given, list) else []
    for key in _NODE_TAINTS:
        if not any(isinstance(t, dict) and t.get("key") in (key, "", None)
                   and t.get("effect") in ("NoExecute", "", None) for t in tolerations):
            tolerations = [*tolerations, {"key": key, "operator": "Exists", "effect": "NoExecute",
                                          "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}]
    spec["tolerations"] = tolerations


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def label_namespace_name(obj: Obj) -> None:
    """The namespace strategy's PrepareForCreate/PrepareForUpdate: every Namespace carries the immutable
    ``kubernetes.io/metadata.name=<name>`` label (GA in 1.22), so that selectors can name namespaces."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"]:
        given = meta.get("labels")
        labels: Obj = given if isinstance(given, dict) else {}
        meta["labels"] = {**labels, NAMESPACE_NAME_LABEL: meta["name"]}


SCHEDULING_GATED = "SchedulingGated"


def scheduling_gated_condition(pod: Obj) -> None:
    """``applySchedulingGatedCondition`` (the pod strategy's PrepareForCreate, after the mutating admission
    webhooks): a pod created with scheduling gates and no PodScheduled condition gets PodScheduled=False with reason
    SchedulingGated, so that ``kubectl get pods`` shows STATUS SchedulingGated. (The real PrepareForCreate first
    resets the whole status; the emulator keeps what the client sent.)"""
    spec, status = pod.get("spec"), pod.get("status")
    if not isinstance(spec, dict) or not spec.get("schedulingGates") or not isinstance(status, dict):
        return
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        conditions = []
    if any(isinstance(c, dict) and c.get("type") == "PodScheduled" for c in conditions):
        return
    status["conditions"] = [*conditions, {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                                          "lastTransitionTime": now(), "reason": SCHEDULING_GATED,
                                          "message": "Scheduling is blocked due to non-empty scheduling gates"}]


def _job_policies(spec: Obj) -> None:
    """``SetDefaults_Job``: podReplacementPolicy Failed with a podFailurePolicy (the only value it allows), else
    TerminatingOrFailed; an onPodConditions pattern's status True."""
    policy = spec.get("podFailurePolicy")
    spec.setdefault("podReplacementPolicy", "Failed" if policy is not None else "TerminatingOrFailed")
    rules = policy.get("rules") if isinstance(policy, dict) else None
    for rule in rules if isinstance(rules, list) else []:
        patterns = rule.get("onPodConditions") if isinstance(rule, dict) else None
        for pattern in patterns if isinstance(patterns, list) else []:
            if isinstance(pattern, dict) and not pattern.get("status"):
                pattern["status"] = "True"


def default_priority_class(obj: Obj) -> None:
    """``SetDefaults_PriorityClass``, on every write (an update that omits preemptionPolicy means the default, not a
    change of the immutable field)."""
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


def apply_defaults(kind: str, group: str, obj: Obj) -> None:
    """Fill in defaults in place, for the built-in kinds we serve (on create; for pods also the
    DefaultTolerationSeconds admission plugin, which runs before the admission webhooks; a pod's priority is the
    Priority admission plugin's, ``cluster/priority.py``)."""
    spec = obj.get("spec")
    if group == "" and kind == "Pod" and isinstance(spec, dict):
        _pod_spec(spec)
        _default_tolerations(spec)
        status = obj.setdefault("status", {})
        if isinstance(status, dict):
            status.setdefault("phase", "Pending")
            status.setdefault("qosClass", _qos(spec))
    elif group == "" and kind == "Namespace":
        label_namespace_name(obj)  # spec.finalizers are the strategy's (cluster/lifecycle.py prepare_for_create)
        obj.setdefault("status", {}).setdefault("phase", "Active")
    elif group == "batch" and kind == "Job" and isinstance(spec, dict):
        if spec.get("parallelism") is None and spec.get("completions") is None:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        _job_policies(spec)
        if isinstance(spec.get("template"), dict) and isinstance(spec["template"].get("spec"), dict):
            _pod_spec(spec["template"]["spec"])
    elif group == "scheduling.k8s.io" and kind == "PriorityClass":
        default_priority_class(obj)
    elif group == "apps" and kind == "StatefulSet" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        if isinstance(spec.get("template"), dict) and isinstance(spec["template"].get("spec"), dict):
            _pod_spec(spec["template"]["spec"])
