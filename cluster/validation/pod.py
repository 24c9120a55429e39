"""ValidatePodCreate: the part of ValidatePodSpec the emulator ports (containers, scheduling gates,
tolerations, node affinity, the name-valued fields, activeDeadlineSeconds) and the create-only rules."""

from __future__ import annotations

from typing import Any

from cluster.store import Obj
from cluster.validation.errors import duplicate, forbidden, invalid, not_supported, required, unique
from cluster.validation.meta import validate_object_meta
from cluster.validation.names import dns1123_label, dns1123_subdomain, label_value, labels_errors, qualified_name
from cluster.validation.resources import resources_errors

MAX_INT32 = 2**31 - 1


def _container_errors(ctr: Obj, path: str) -> list[str]:
    """validateContainerCommon (name, image, resources) plus the pod-only image whitespace rule."""
    name, image = ctr.get("name") or "", ctr.get("image") or ""
    errs = [required(f"{path}.name")] if not name else [invalid(f"{path}.name", name, m)
                                                         for m in dns1123_label(name)]
    if not image:
        errs.append(required(f"{path}.image"))
    elif image != image.strip():
        errs.append(invalid(f"{path}.image", image, "must not have leading or trailing whitespace"))
    return errs + resources_errors(ctr.get("resources"), f"{path}.resources")


def _containers_errors(spec: Obj) -> list[str]:
    """At least one container; names unique across containers and init containers."""
    containers, inits = spec.get("containers") or [], spec.get("initContainers") or []
    errs = [] if containers else [required("spec.containers")]
    seen: set[str] = set()
    for i, ctr in enumerate(containers):
        errs += _container_errors(ctr, f"spec.containers[{i}]")
        if ctr.get("name", "") in seen:
            errs.append(duplicate(f"spec.containers[{i}].name", ctr.get("name", "")))
        seen.add(ctr.get("name", ""))
    seen = {c.get("name", "") for c in containers}
    for i, ctr in enumerate(inits):
        errs += _container_errors(ctr, f"spec.initContainers[{i}]")
        if ctr.get("name", "") in seen:
            errs.append(duplicate(f"spec.initContainers[{i}].name", ctr.get("name", "")))
        elif ctr.get("name"):
            seen.add(ctr["name"])
    return errs


def _scheduling_gate_errors(gates: Any) -> list[str]:
    """validateSchedulingGates: qualified names, no duplicates (errors at ``spec.schedulingGates[i]``)."""
    errs, seen = [], set()
    for i, gate in enumerate(gates or []):
        name = (gate or {}).get("name") or ""
        errs += [invalid(f"spec.schedulingGates[{i}]", name, m) for m in qualified_name(name)]
        if name in seen:
            errs.append(duplicate(f"spec.schedulingGates[{i}]", name))
        seen.add(name)
    return errs


def toleration_errors(tolerations: Any, path: str = "spec.tolerations") -> list[str]:
    """ValidateTolerations."""
    errs: list[str] = []
    for i, tol in enumerate(tolerations or []):
        at, key, op = f"{path}[{i}]", tol.get("key") or "", tol.get("operator") or ""
        value, effect = tol.get("value") or "", tol.get("effect") or ""
        if key:
            errs += [invalid(f"{at}.key", key, m) for m in qualified_name(key)]
        if not key and op != "Exists":
            errs.append(invalid(f"{at}.operator", op, "operator must be Exists when `key` is empty, which means "
                                                      '"match all values and all keys"'))
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            errs.append(invalid(f"{at}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
        if op in ("Equal", ""):
            msgs = label_value(value)
            errs += [invalid(f"{at}.operator", value, ";".join(msgs))] if msgs else []
        elif op == "Exists" and value:
            errs.append(invalid(f"{at}.operator", value, "value must be empty when `operator` is 'Exists'"))
        elif op != "Exists":
            errs.append(not_supported(f"{at}.operator", op, ["Equal", "Exists"]))
        if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errs.append(not_supported(f"{at}.effect", effect, ["NoSchedule", "PreferNoSchedule", "NoExecute"]))
    return errs


def _requirement_errors(req: Obj, path: str) -> list[str]:
    """ValidateNodeSelectorRequirement (matchExpressions)."""
    op, values, errs = req.get("operator") or "", req.get("values") or [], []
    if op in ("In", "NotIn") and not values:
        errs.append(required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist") and values:
        errs.append(forbidden(f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op in ("Gt", "Lt") and len(values) != 1:
        errs.append(required(f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'"))
    elif op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        errs.append(invalid(f"{path}.operator", op, "not a valid selector operator"))
    return errs + [invalid(f"{path}.key", req.get("key") or "", m) for m in qualified_name(req.get("key") or "")]


def _field_requirement_errors(req: Obj, path: str) -> list[str]:
    """ValidateNodeFieldSelectorRequirement (matchFields): only metadata.name, In/NotIn with one value."""
    op, values, errs = req.get("operator") or "", req.get("values") or [], []
    if op not in ("In", "NotIn"):
        errs.append(invalid(f"{path}.operator", op, "not a valid selector operator"))
    elif len(values) != 1:
        errs.append(required(f"{path}.values",
                             "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
    if req.get("key") != "metadata.name":
        return errs + [invalid(f"{path}.key", req.get("key") or "", "not a valid field selector key")]
    return errs + [invalid(f"{path}.values[{i}]", v, m) for i, v in enumerate(values) for m in dns1123_subdomain(v)]


def _term_errors(term: Obj, path: str) -> list[str]:
    errs = [e for j, r in enumerate(term.get("matchExpressions") or [])
            for e in _requirement_errors(r, f"{path}.matchExpressions[{j}]")]
    return errs + [e for j, r in enumerate(term.get("matchFields") or [])
                   for e in _field_requirement_errors(r, f"{path}.matchFields[{j}]")]


def _node_affinity_errors(spec: Obj) -> list[str]:
    """validateNodeAffinity: required terms (at least one) and weighted preferred terms."""
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    path, errs = "spec.affinity.nodeAffinity", []
    hard = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if hard is not None:
        terms = hard.get("nodeSelectorTerms") or []
        at = f"{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        errs += [required(at, "must have at least one node selector term")] if not terms else [
            e for i, t in enumerate(terms) for e in _term_errors(t or {}, f"{at}[{i}]")]
    for i, pref in enumerate(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        at, weight = f"{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}]", pref.get("weight") or 0
        if not 0 < weight <= 100:
            errs.append(invalid(f"{at}.weight", weight, "must be in the range 1-100"))
        errs += _term_errors(pref.get("preference") or {}, f"{at}.preference")
    return errs


_NAME_FIELDS = {  # spec field -> its name rule
    "nodeName": dns1123_subdomain, "serviceAccountName": dns1123_subdomain,
    "priorityClassName": dns1123_subdomain, "hostname": dns1123_label, "subdomain": dns1123_label,
}


def pod_spec_errors(spec: Obj) -> list[str]:
    """The part of ValidatePodSpec this emulator ports. spec.schedulerName is deliberately absent: upstream
    ValidatePodSpec does not validate it, so any string is accepted."""
    errs = _containers_errors(spec)
    errs += labels_errors(spec.get("nodeSelector"), "spec.nodeSelector")
    errs += _node_affinity_errors(spec)
    errs += _scheduling_gate_errors(spec.get("schedulingGates"))
    errs += toleration_errors(spec.get("tolerations"))
    for key, check in _NAME_FIELDS.items():
        if spec.get(key):
            errs += [invalid(f"spec.{key}", spec[key], m) for m in check(spec[key])]
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and not 1 <= deadline <= MAX_INT32:
        errs.append(invalid("spec.activeDeadlineSeconds", deadline, f"must be between 1 and {MAX_INT32}, inclusive"))
    return errs


def validate_pod_create(pod: Obj) -> list[str]:
    """ValidatePodCreate: metadata, spec, and the create-only rules (no ephemeral containers; no nodeName
    while scheduling gates remain — a gated pod must wait for its gates, then be bound). Empty list: valid."""
    spec = pod.get("spec") or {}
    errs = validate_object_meta(pod, True) + pod_spec_errors(spec)
    if spec.get("ephemeralContainers"):
        errs.append(forbidden("spec.ephemeralContainers", "cannot be set on create"))
    if spec.get("nodeName") and spec.get("schedulingGates"):
        errs.append(forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared"))
    return unique(errs)
