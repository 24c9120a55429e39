"""ObjectMeta on create and update (apimachinery api/validation/objectmeta.go, generic.go): name or
generateName, namespace, labels, annotations, owner references, finalizers, and what an update may not change."""

from __future__ import annotations

import json
from typing import Any

from cluster.store import Obj
from cluster.validation.errors import forbidden, invalid, required, unique
from cluster.validation.names import (
    byte_size,
    dns1123_label,
    dns1123_subdomain,
    labels_errors,
    mask_trailing_dash,
    qualified_name,
)

MAX_ANNOTATIONS_BYTES = 256 * 1024  # TotalAnnotationSizeLimitB
_GENERATED_BASE_MAX = 63 - 5  # names.SimpleNameGenerator: base truncated so base + 5 random chars fit 63


def _name_errors(meta: Obj, dns_label_name: bool) -> list[str]:
    """Name rules; with only generateName, the name the apiserver generates before validating it."""
    check = dns1123_label if dns_label_name else dns1123_subdomain
    generate = meta.get("generateName") or ""
    errs = [invalid("metadata.generateName", generate, m) for m in check(mask_trailing_dash(generate)) if generate]
    name = meta.get("name") or ""
    if not name and generate:
        name = generate[:_GENERATED_BASE_MAX] + "bcdfg"  # suffix drawn from the generator's alphabet
    if not name:
        return errs + [required("metadata.name", "name or generateName is required")]
    return errs + [invalid("metadata.name", name, m) for m in check(name)]


def _namespace_errors(meta: Obj, namespaced: bool) -> list[str]:
    namespace = meta.get("namespace") or ""
    if not namespaced:
        return [forbidden("metadata.namespace", "not allowed on this type")] if namespace else []
    if not namespace:
        return [required("metadata.namespace")]
    return [invalid("metadata.namespace", namespace, m) for m in dns1123_label(namespace)]


def _annotations_errors(annotations: Any) -> list[str]:
    """Keys are qualified names compared lowercased; keys plus values at most 256 KiB in total."""
    annotations = annotations or {}
    errs = [invalid("metadata.annotations", k, m) for k in annotations for m in qualified_name(k.lower())]
    total = sum(byte_size(k) + byte_size(v) for k, v in annotations.items() if isinstance(v, str))
    if total > MAX_ANNOTATIONS_BYTES:
        errs.append(f"metadata.annotations: Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes")
    return errs


def _owner_reference_errors(refs: Any) -> list[str]:
    """Each reference names apiVersion (with a version), kind, name, uid; at most one is the controller."""
    path, errs, controller = "metadata.ownerReferences", [], ""
    for ref in refs or []:
        api_version = ref.get("apiVersion") or ""
        group_version = api_version.split("/")
        version = "" if len(group_version) > 2 else group_version[-1]
        if not version:
            errs.append(invalid(f"{path}.apiVersion", api_version, "version must not be empty"))
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                errs.append(invalid(f"{path}.{key}", ref.get(key) or "", "must not be empty"))
        if api_version == "v1" and ref.get("kind") == "Event":
            errs.append(invalid(path, ref, "/v1, Kind=Event is disallowed from being an owner"))
        if ref.get("controller") is True:
            current = f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if controller:
                errs.append(invalid(path, refs, 'Only one reference can have Controller set to true. Found "true" '
                                                f"in references for {controller} and {current}"))
            else:
                controller = current
    return errs


def _finalizer_errors(finalizers: Any) -> list[str]:
    finalizers = finalizers or []
    errs = [invalid("metadata.finalizers", f, m) for f in finalizers for m in qualified_name(f)]
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        errs.append(invalid("metadata.finalizers", finalizers,
                            "finalizer orphan and foregroundDeletion cannot be both set"))
    return errs


def validate_object_meta(obj: Obj, namespaced: bool, *, dns_label_name: bool = False) -> list[str]:
    """ValidateObjectMeta on create: name (a DNS-1123 subdomain, or a label with ``dns_label_name`` as for
    Namespace), namespace, labels, annotations, owner references, finalizers. Empty list: valid."""
    meta = obj.get("metadata") or {}
    errs = _name_errors(meta, dns_label_name) + _namespace_errors(meta, namespaced)
    generation = meta.get("generation")
    if isinstance(generation, int) and generation < 0:
        errs.append(invalid("metadata.generation", generation, "must be greater than or equal to 0"))
    errs += labels_errors(meta.get("labels"), "metadata.labels")
    errs += _annotations_errors(meta.get("annotations"))
    errs += _owner_reference_errors(meta.get("ownerReferences"))
    return unique(errs + _finalizer_errors(meta.get("finalizers")))


def object_meta_update_errors(new: Obj, old: Obj) -> list[str]:
    """ValidateObjectMetaUpdate after rest.BeforeUpdate's fill-ins.

    The store copies the stored uid (when none is sent), creationTimestamp, deletionTimestamp, grace period,
    generation and — for unconditional updates — resourceVersion before validating, so only real changes of
    identity fail here.
    """
    errs: list[str] = []
    if old.get("deletionTimestamp"):
        added = sorted(set(new.get("finalizers") or []) - set(old.get("finalizers") or []))
        if added:
            shown = ", ".join(json.dumps(f) for f in added)
            errs.append(forbidden("metadata.finalizers", "no new finalizers can be added if the object is being "
                                                         f"deleted, found new finalizers []string{{{shown}}}"))
    for key in ("name", "namespace", "uid"):
        new_value, old_value = new.get(key) or "", old.get(key) or ""
        if key == "uid" and not new_value:
            continue
        if new_value != old_value:
            errs.append(invalid(f"metadata.{key}", new_value, "field is immutable"))
    return errs
