"""ValidatePodUpdate: metadata identity, then a spec that is immutable except images, activeDeadlineSeconds,
added tolerations, removed scheduling gates and — only while the stored pod is gated (KEP-3521, KEP-3838) —
added nodeSelector keys and narrowed required node affinity."""

from __future__ import annotations

import copy
from typing import Any

from cluster.quantity import parse_or_none
from cluster.store import Obj
from cluster.validation.errors import forbidden, invalid, printed, required, unique
from cluster.validation.meta import object_meta_update_errors, validate_object_meta
from cluster.validation.pod import MAX_INT32, pod_spec_errors, toleration_errors

_UPDATABLE = ("pod updates may not change fields other than `spec.containers[*].image`,"
              "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
              "`spec.tolerations` (only additions to existing tolerations),"
              "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")
_MAP_FIELDS = frozenset({"nodeSelector", "limits", "requests", "overhead", "matchLabels", "volumeAttributes"})
_QUANTITY_MAPS = frozenset({"limits", "requests", "overhead"})


def _semantic(value: Any, key: str = "") -> Any:
    """A form where apiequality.Semantic.DeepEqual is ``==``: nulls, empty lists and empty maps are absent,
    and quantities compare by value ("1" == "1000m")."""
    if isinstance(value, dict):
        if key in _QUANTITY_MAPS:
            return {k: (q.value if (q := parse_or_none(v)) else v) for k, v in value.items() if v is not None}
        pairs = ((k, _semantic(v, k)) for k, v in value.items())
        return {k: v for k, v in pairs if v is not None and v != [] and not (v == {} and k in _MAP_FIELDS)}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _changes(old: Any, new: Any, path: str) -> list[str]:
    """Where two semantic forms differ, for the Forbidden message (upstream prints a cmp.Diff)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in dict.fromkeys([*old, *new]) for c in _changes(old.get(k), new.get(k), f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [c for i, (o, n) in enumerate(zip(old, new, strict=True)) for c in _changes(o, n, f"{path}[{i}]")]
    return [] if old == new else [f"  {path}: {printed(old)[:120]} -> {printed(new)[:120]}"]


def _container_update_errors(new: list[Obj], old: list[Obj], path: str) -> tuple[list[str], bool]:
    """ValidateContainerUpdates: same containers (else stop), images non-empty and untrimmed."""
    if len(new) != len(old):
        return [forbidden(path, "pod updates may not add or remove containers")], True
    errs: list[str] = []
    for i, ctr in enumerate(new):
        image = ctr.get("image") or ""
        if not image:
            errs.append(required(f"{path}[{i}].image"))
        if image != image.strip():
            errs.append(invalid(f"{path}[{i}].image", image, "must not have leading or trailing whitespace"))
    return errs, False


def _deadline_update_errors(new: Any, old: Any) -> tuple[list[str], bool]:
    """activeDeadlineSeconds may be set, or lowered; never raised or unset."""
    path = "spec.activeDeadlineSeconds"
    if new is None:
        return ([invalid(path, None, "must not update from a positive integer to nil value")] if old is not None
                else []), False
    if not 0 <= new <= MAX_INT32:
        return [invalid(path, new, f"must be between 0 and {MAX_INT32}, inclusive")], True
    if old is not None and old < new:
        return [invalid(path, new, "must be less than or equal to previous value")], True
    return [], False


def _toleration_key(tol: Obj) -> dict[str, Any]:
    return {k: v for k, v in tol.items() if k != "tolerationSeconds" and v not in (None, "")}


def _toleration_update_errors(new: list[Obj], old: list[Obj]) -> list[str]:
    """validateOnlyAddedTolerations: every old toleration kept (its tolerationSeconds may change)."""
    kept = [_toleration_key(t) for t in new]
    if any(_toleration_key(t) not in kept for t in old):
        return [forbidden("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds")]
    return toleration_errors(new)


def _gate_update_errors(new: list[Obj], old: list[Obj]) -> list[str]:
    """validateOnlyDeletedSchedulingGates: gates can only be removed, never added."""
    old_names = {g.get("name") for g in old}
    added = {g.get("name"): i for i, g in enumerate(new) if g.get("name") not in old_names}
    return [forbidden(f"spec.schedulingGates[{i}].name", f"only deletion is allowed, but found new scheduling gate "
                                                         f"'{name}'") for name, i in added.items()]


def _node_selector_update_errors(new: Any, old: Any) -> list[str]:
    """validateNodeSelectorMutation (gated pods): keys may be added; none changed or removed."""
    new, old = new or {}, old or {}
    if any(new.get(k) != v for k, v in old.items()):
        return [invalid("spec.nodeSelector", new, "only additions to spec.nodeSelector are allowed "
                                                  "(no mutations or deletions)")]
    return []


def _term_only_adds(new: Obj, old: Obj) -> bool:
    """validateNodeSelectorTermHasOnlyAdditions: old requirements kept in order, new ones appended.
    An empty old term must stay empty (upstream rule)."""
    old_exprs, old_fields = _semantic(old.get("matchExpressions") or []), _semantic(old.get("matchFields") or [])
    new_exprs, new_fields = _semantic(new.get("matchExpressions") or []), _semantic(new.get("matchFields") or [])
    if not old_exprs and not old_fields and (new_exprs or new_fields):
        return False
    return new_exprs[:len(old_exprs)] == old_exprs and new_fields[:len(old_fields)] == old_fields


def _node_affinity_update_errors(new: Any, old: Any) -> list[str]:
    """validateNodeAffinityMutation (gated pods): required terms may only be narrowed; preferred terms are free."""
    old_required = (old or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if old_required is None:
        return []  # nothing required before: anything may be set
    old_terms = old_required.get("nodeSelectorTerms") or []
    new_terms = ((new or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    if old_terms and len(old_terms) != len(new_terms):
        return [invalid(path, new_terms, "no additions/deletions to non-empty NodeSelectorTerms list are allowed")]
    return [invalid(f"{path}[{i}]", new_terms[i], "only additions are allowed (no mutations or deletions)")
            for i, term in enumerate(old_terms) if not _term_only_adds(new_terms[i] or {}, term or {})]


def _put(obj: Obj, key: str, value: Any) -> None:
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = copy.deepcopy(value)


def _munge_gated(munged: Obj, old: Obj) -> list[str]:
    """While the old pod is gated: check nodeSelector and node affinity changes, then take the old values."""
    errs: list[str] = []
    if _semantic(munged.get("nodeSelector"), "nodeSelector") != _semantic(old.get("nodeSelector"), "nodeSelector"):
        errs += _node_selector_update_errors(munged.get("nodeSelector"), old.get("nodeSelector"))
        _put(munged, "nodeSelector", old.get("nodeSelector"))
    old_affinity, affinity = old.get("affinity"), munged.get("affinity")
    old_na, new_na = (old_affinity or {}).get("nodeAffinity"), (affinity or {}).get("nodeAffinity")
    if _semantic(new_na) == _semantic(old_na):
        return errs
    errs += _node_affinity_update_errors(new_na, old_na)
    if affinity is None:
        _put(munged, "affinity", None if old_na is None else {"nodeAffinity": old_na})
    elif old_affinity is None and affinity.get("podAffinity") is None and affinity.get("podAntiAffinity") is None:
        munged.pop("affinity")
    else:
        _put(affinity, "nodeAffinity", old_na)
    return errs


def _munge(new: Obj, old: Obj) -> Obj:
    """The new spec with every field an update may change replaced by its old value."""
    munged = copy.deepcopy(new)
    for key in ("containers", "initContainers"):
        for ctr, old_ctr in zip(munged.get(key) or [], old.get(key) or [], strict=True):
            _put(ctr, "image", old_ctr.get("image"))
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        _put(munged, key, old.get(key))
    old_grace = old.get("terminationGracePeriodSeconds")
    if old_grace is not None and old_grace < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    return munged


def _spec_update_errors(new: Obj, old: Obj) -> list[str]:
    """ValidatePodUpdate's spec rules, in upstream order (including where it stops early)."""
    errs: list[str] = []
    for key in ("containers", "initContainers"):
        found, stop = _container_update_errors(new.get(key) or [], old.get(key) or [], f"spec.{key}")
        errs += found
        if stop:
            return errs
    found, stop = _deadline_update_errors(new.get("activeDeadlineSeconds"), old.get("activeDeadlineSeconds"))
    errs += found
    if stop:
        return errs
    errs += _toleration_update_errors(new.get("tolerations") or [], old.get("tolerations") or [])
    errs += _gate_update_errors(new.get("schedulingGates") or [], old.get("schedulingGates") or [])
    if _semantic(new) == _semantic(old):
        return errs
    munged = _munge(new, old)
    if old.get("schedulingGates"):  # gated is judged on the stored pod: the last gate may go in the same update
        errs += _munge_gated(munged, old)
    if _semantic(munged) != _semantic(old):
        errs.append(forbidden("spec", "\n".join([_UPDATABLE, *_changes(_semantic(old), _semantic(munged), "spec")])))
    return errs


def validate_pod_update(old: Obj, new: Obj) -> list[str]:
    """ValidatePodUpdate: metadata (create rules and identity), then a spec that is immutable except images,
    activeDeadlineSeconds (set or lowered), added tolerations, removed scheduling gates and — only while the
    stored pod still has gates — added nodeSelector keys and narrowed required node affinity. nodeName never
    changes here: binding is the pods/binding subresource. Empty list: valid."""
    errs = object_meta_update_errors(new.get("metadata") or {}, old.get("metadata") or {})
    errs += validate_object_meta(new, True)
    errs += pod_spec_errors(new.get("spec") or {})
    return unique(errs + _spec_update_errors(new.get("spec") or {}, old.get("spec") or {}))
