"""PATCH bodies applied the way kube-apiserver applies them, on plain-dict objects.

Why: controllers, kubectl and our own gate controller all PATCH, and the result (list order included)
and the HTTP error for a bad patch must match a real apiserver. JSON patch is RFC 6902 (evanphx errors:
decode failure 400, apply failure 422), merge patch is RFC 7386, and strategic merge patch is a port of
k8s.io/apimachinery/pkg/util/strategicpatch (server side: parallel lists merged, unmatched nulls
ignored) driven by the patchStrategy/patchMergeKey tags of the built-in types we serve. Server-side apply
(``server_side_apply``) is the part of it ``kubectl apply --server-side`` relies on: see its docstring.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import jsonpatch
import jsonpointer

__all__ = ["APPLY_PATCH", "JSON_PATCH", "MERGE_PATCH", "STRATEGIC_MERGE_PATCH", "PatchError", "apply_patch",
           "server_side_apply", "strategic_merge"]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
_MAX_JSON_PATCH_OPS = 10000


class PatchError(Exception):
    """A failed PATCH as the apiserver reports it: HTTP ``status``, Status ``reason`` and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def _bad_request(message: str) -> PatchError:
    return PatchError(400, "BadRequest", message)


def _invalid(message: str) -> PatchError:
    return PatchError(422, "Invalid", message)


def _internal(message: str) -> PatchError:
    """strategicpatch errors the apiserver does not classify become code 500 with reason Unknown ("")."""
    return PatchError(500, "", message)


def _unsupported(accepted: tuple[str, ...]) -> PatchError:
    return PatchError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: " + ", ".join(accepted),
    )


# --- schema: patchStrategy / patchMergeKey of the built-in types ------------------------------------


class _Field(NamedTuple):
    """``key`` None: no merge strategy (lists replaced); "": merged primitive list; else merge key."""

    key: str | None = None
    fields: Mapping[str, _Field] = {}


_NO_FIELD = _Field()
_META = _Field(fields={"ownerReferences": _Field("uid"), "finalizers": _Field("")})
_CONDITIONS = _Field("type")
_CONTAINER = {
    "ports": _Field("containerPort"),
    "env": _Field("name"),
    "volumeMounts": _Field("mountPath"),
    "volumeDevices": _Field("devicePath"),
}
_POD_SPEC = _Field(
    fields={
        "containers": _Field("name", _CONTAINER),
        "initContainers": _Field("name", _CONTAINER),
        "ephemeralContainers": _Field("name", _CONTAINER),
        "volumes": _Field("name"),
        "imagePullSecrets": _Field("name"),
        "schedulingGates": _Field("name"),
        "resourceClaims": _Field("name"),
        "hostAliases": _Field("ip"),
        "topologySpreadConstraints": _Field("topologyKey"),
    }
)
_POD_STATUS = _Field(
    fields={
        "conditions": _CONDITIONS,
        "podIPs": _Field("ip"),
        "hostIPs": _Field("ip"),
        "resourceClaimStatuses": _Field("name"),
    }
)
_TEMPLATE = _Field(fields={"metadata": _META, "spec": _POD_SPEC})
_STATUS_CONDITIONS = _Field(fields={"conditions": _CONDITIONS})
_WORKLOAD = {"metadata": _META, "spec": _Field(fields={"template": _TEMPLATE}), "status": _STATUS_CONDITIONS}
_WEBHOOKS = {"metadata": _META, "webhooks": _Field("name")}

# kind -> (API groups serving it, root schema)
_BUILTIN: dict[str, tuple[frozenset[str], Mapping[str, _Field]]] = {
    "Pod": (frozenset({""}), {"metadata": _META, "spec": _POD_SPEC, "status": _POD_STATUS}),
    "Node": (
        frozenset({""}),
        {
            "metadata": _META,
            "spec": _Field(fields={"podCIDRs": _Field("")}),
            "status": _Field(fields={"conditions": _CONDITIONS, "addresses": _Field("type")}),
        },
    ),
    "Namespace": (frozenset({""}), {"metadata": _META, "status": _STATUS_CONDITIONS}),
    "Service": (
        frozenset({""}),
        {"metadata": _META, "spec": _Field(fields={"ports": _Field("port")}), "status": _STATUS_CONDITIONS},
    ),
    "ConfigMap": (frozenset({""}), {"metadata": _META}),
    "Secret": (frozenset({""}), {"metadata": _META}),
    "Event": (frozenset({"", "events.k8s.io"}), {"metadata": _META}),
    "Job": (frozenset({"batch"}), _WORKLOAD),
    "StatefulSet": (frozenset({"apps"}), _WORKLOAD),
    "Deployment": (frozenset({"apps"}), _WORKLOAD),
    "PodDisruptionBudget": (frozenset({"policy"}), {"metadata": _META, "status": _STATUS_CONDITIONS}),
    "NetworkPolicy": (frozenset({"networking.k8s.io"}), {"metadata": _META}),  # its lists have no merge keys
    "ServiceAccount": (frozenset({""}), {"metadata": _META, "secrets": _Field("name")}),
    "ClusterRole": (frozenset({"rbac.authorization.k8s.io"}), {"metadata": _META}),
    "ClusterRoleBinding": (frozenset({"rbac.authorization.k8s.io"}), {"metadata": _META}),
    "Role": (frozenset({"rbac.authorization.k8s.io"}), {"metadata": _META}),
    "RoleBinding": (frozenset({"rbac.authorization.k8s.io"}), {"metadata": _META}),
    "Lease": (frozenset({"coordination.k8s.io"}), {"metadata": _META}),
    "PriorityClass": (frozenset({"scheduling.k8s.io"}), {"metadata": _META}),
    "MutatingWebhookConfiguration": (frozenset({"admissionregistration.k8s.io"}), _WEBHOOKS),
    "ValidatingWebhookConfiguration": (frozenset({"admissionregistration.k8s.io"}), _WEBHOOKS),
}


def _builtin_kind(obj: Mapping[str, Any]) -> str | None:
    """The built-in kind an object is, judged by apiVersion group too (a CRD may reuse a kind name)."""
    kind = obj.get("kind")
    if kind not in _BUILTIN:
        return None
    api_version = obj.get("apiVersion")
    if api_version is None:
        return kind
    group = api_version.split("/")[0] if "/" in api_version else ""
    return kind if group in _BUILTIN[kind][0] else None


# --- entry points ----------------------------------------------------------------------------------------


def apply_patch(obj: dict, content_type: str, body: bytes, *, schema_kind: str | None = None) -> dict:
    """Apply a PATCH request body; ``content_type`` may carry parameters (``; charset=utf-8``).

    ``schema_kind`` overrides the kind used for strategic merge (default: the object's built-in kind;
    custom resources have none and get 415 like the apiserver gives them).
    """
    if (idx := content_type.find(";")) > 0:
        content_type = content_type[:idx]
    kind = schema_kind if schema_kind is not None else _builtin_kind(obj)
    accepted = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH) if kind in _BUILTIN else (JSON_PATCH, MERGE_PATCH)
    if content_type not in accepted:
        raise _unsupported(accepted)
    document = _decode(body)
    if content_type == JSON_PATCH:
        result = _json_patch(obj, document)
    elif content_type == MERGE_PATCH:
        if not isinstance(document, dict):
            raise _bad_request("error decoding patch: the patch is not a JSON object")
        result = _merge_patch(copy.deepcopy(obj), document)
    else:
        if document is not None and not isinstance(document, dict):
            raise _bad_request("error decoding patch: the patch is not a JSON object")
        result = strategic_merge(obj, document or {}, kind or "")
    if not isinstance(result, dict):
        raise _invalid(f"patch: Invalid value: {json.dumps(result)}: the patched document is not a JSON object")
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character in numeric literal: {name}")


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad_request(f"error decoding patch: {exc}") from None


def _json_patch(obj: dict, ops: Any) -> Any:
    fields = {"op", "path", "from"}
    if not isinstance(ops, list) or not all(
        isinstance(op, dict) and all(isinstance(op.get(f), str | None) for f in fields) for op in ops
    ):
        raise _bad_request("error decoding patch: a JSON patch must be an array of operation objects")
    if len(ops) > _MAX_JSON_PATCH_OPS:
        raise PatchError(
            413,
            "RequestEntityTooLarge",
            f"The allowed maximum operations in a JSON patch is {_MAX_JSON_PATCH_OPS}, got {len(ops)}",
        )
    try:
        return jsonpatch.JsonPatch(ops).apply(obj, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, KeyError, IndexError, TypeError) as exc:
        raise _invalid(str(exc) or type(exc).__name__) from None


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, in place on private copies: objects merge, null deletes, else replace."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge_patch(target.get(key), value)
    return target


def strategic_merge(original: dict, patch: dict, schema_kind: str) -> dict:
    """Strategic merge ``patch`` into ``original`` using the patch metadata of built-in ``schema_kind``.

    Directive keys left over where the apiserver would have dropped them as unknown fields while
    decoding into the typed object are removed from the result.
    """
    if schema_kind not in _BUILTIN:
        raise _unsupported((JSON_PATCH, MERGE_PATCH))
    merged = _merge_map(copy.deepcopy(original), copy.deepcopy(patch), _Field(fields=_BUILTIN[schema_kind][1]))
    return _strip_directives(merged)


# --- server-side apply ---------------------------------------------------------------------------------------

_Path = tuple[str, ...]  # FieldsV1 path elements: "f:<field>", "k:<list item key as JSON>", "v:<set value as JSON>"


def server_side_apply(live: dict | None, applied: dict, manager: str, api_version: str, time: str) -> dict:
    """``applied`` (an apply configuration, ``manager``'s whole intent) applied to ``live`` (None: created).

    As the Server-Side Apply documentation describes it: the fields ``manager`` applied before and applies no more
    are removed, the applied fields merged in (maps field by field; lists by the merge keys of the built-in types,
    which are their list-map keys; other lists, and every list of a custom resource, replaced whole), and the
    fields it applied recorded as its ``Apply`` entry in ``metadata.managedFields`` (FieldsV1), which is where the
    next apply finds them. Not emulated: conflicts with other managers (409 without ``force``), since the emulator
    records no field ownership for writes other than apply; nor are fields another manager also owns kept back
    from removal.
    """
    kind = _builtin_kind(applied)
    schema = _Field(fields=_BUILTIN[kind][1]) if kind else _NO_FIELD
    intent = copy.deepcopy(applied)
    meta = intent.get("metadata") or {}
    meta.pop("managedFields", None)
    meta.pop("resourceVersion", None)
    owned = _owned({k: v for k, v in intent.items() if k not in ("apiVersion", "kind", "status")}, schema)
    entries = [e for e in ((live or {}).get("metadata") or {}).get("managedFields") or []
               if not (e.get("manager") == manager and e.get("operation") == "Apply")]
    result = copy.deepcopy(live) if live is not None else {}
    if live is not None:
        before = next((e for e in live["metadata"].get("managedFields") or []
                       if e.get("manager") == manager and e.get("operation") == "Apply"), None)
        _drop(result, _paths(before.get("fieldsV1") or {}) - owned if before else set())
    result = strategic_merge(result, intent, kind) if kind else _merge_patch(result, intent)
    entries.append({"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": time,
                    "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(owned)})
    result.setdefault("metadata", {})["managedFields"] = entries
    return result


def _owned(value: Any, schema: _Field, path: _Path = ()) -> set[_Path]:
    """Every field path of ``value``, as FieldsV1 names them."""
    paths: set[_Path] = set()
    if isinstance(value, dict):
        for name, child in value.items():
            here = (*path, f"f:{name}")
            paths |= {here} | _owned(child, _sub(schema, name), here)
    elif isinstance(value, list) and schema.key:
        for item in value:
            if isinstance(item, dict) and schema.key in item:
                here = (*path, "k:" + json.dumps({schema.key: item[schema.key]}, separators=(",", ":")))
                paths |= {here} | _owned(item, _Field(fields=schema.fields), here)
    elif isinstance(value, list) and schema.key == "":
        paths |= {(*path, "v:" + json.dumps(item, separators=(",", ":"))) for item in value}
    return paths


def _fields_v1(paths: set[_Path]) -> dict:
    tree: dict = {}
    for path in sorted(paths):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
            if element.startswith("k:"):
                node.setdefault(".", {})
    return tree


def _paths(tree: dict, path: _Path = ()) -> set[_Path]:
    found: set[_Path] = set()
    for element, child in tree.items():
        if element != ".":
            found |= {(*path, element)} | _paths(child, (*path, element))
    return found


def _drop(obj: dict, dropped: set[_Path]) -> None:
    """Remove what a manager applied before and applies no more: a leaf, or a list item, whole; a map or list it
    no longer applies only once nothing others wrote is left in it."""
    removed: set[_Path] = set()
    for path in sorted(dropped, key=len):
        if any(path[:i] in removed for i in range(1, len(path))):
            continue
        leaf = not any(p[:len(path)] == path and p != path for p in dropped)
        if leaf or path[-1].startswith("k:"):
            _remove(obj, path, leaf=True)
            removed.add(path)
    for path in sorted(dropped - removed, key=len, reverse=True):
        if not any(path[:i] in removed for i in range(1, len(path))):
            _remove(obj, path, leaf=False)


def _remove(obj: Any, path: _Path, leaf: bool) -> None:
    """Remove the field at ``path`` from ``obj``: a leaf always, a map or list only once nothing is left in it."""
    parent = obj
    for element in path[:-1]:
        parent = _step(parent, element)
        if parent is None:
            return
    last = path[-1]
    target = _step(parent, last)
    if target is None or (not leaf and target not in ({}, [])):
        return
    if last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif isinstance(parent, list):
        parent.remove(target)


def _step(node: Any, element: str) -> Any:
    kind, text = element[:2], element[2:]
    if kind == "f:":
        return node.get(text) if isinstance(node, dict) else None
    if not isinstance(node, list):
        return None
    if kind == "k:":
        key = json.loads(text)
        return next((i for i in node if isinstance(i, dict) and all(i.get(k) == v for k, v in key.items())), None)
    value = json.loads(text)
    return value if value in node else None


# --- strategic merge (port of strategicpatch.mergeMap and friends) ----------------------------------

_PATCH = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_FROM = "$deleteFromPrimitiveList"
_SET_ORDER = "$setElementOrder"


def _same(a: Any, b: Any) -> bool:
    """Go interface equality: same JSON type and value (so 1 != 1.0 != true)."""
    return type(a) is type(b) and a == b


def _sub(schema: _Field, name: str) -> _Field:
    return schema.fields.get(name, _NO_FIELD)


def _merge_map(original: dict, patch: dict, schema: _Field) -> dict:
    if _PATCH in patch:
        directive = patch.pop(_PATCH)
        if directive == "replace":
            return patch
        if directive == "delete":
            return {}
        raise _internal(f"unknown patch type: {directive} in map: {patch}")
    _apply_retain_keys(original, patch)
    _merge_ordered_lists(original, patch, schema)
    for key, value in patch.items():
        delete_list = key.startswith(_DELETE_FROM)
        if delete_list:
            key = _extract_key(key, _DELETE_FROM)
        if value is None:
            original.pop(key, None)
        elif key not in original or type(original[key]) is not type(value):
            if not delete_list:  # nothing to merge into: take the patch value
                _take(original, key, _discard_nulls(value))
        elif isinstance(value, dict):
            original[key] = _merge_map(original[key], value, _sub(schema, key))
        elif isinstance(value, list):
            field = _sub(schema, key)
            merge = field.key is not None or delete_list
            original[key] = _merge_list(original[key], value, field, delete_list) if merge else value
        else:
            _take(original, key, value)
    return original


def _take(original: dict, key: str, value: Any) -> None:
    kept, keep = _remove_directives(value)
    if keep:
        original[key] = kept
    else:
        original.pop(key, None)


def _apply_retain_keys(original: dict, patch: dict) -> None:
    if _RETAIN_KEYS not in patch:
        return
    retain = patch.pop(_RETAIN_KEYS)
    if not isinstance(retain, list):
        raise _bad_request("invalid patch format of retainKeys")
    for key, value in patch.items():
        if value is not None and not key.startswith((_DELETE_FROM, _SET_ORDER)) and key not in retain:
            raise _bad_request("invalid patch format of retainKeys")
    for key in [k for k in original if k not in retain]:
        del original[key]


def _extract_key(directive: str, prefix: str) -> str:
    head, sep, rest = directive.partition("/")
    if not sep or head != prefix:
        what = "primitive list" if prefix == _DELETE_FROM else "setElementOrder list"
        raise _bad_request(f"invalid patch format of {what}")
    return rest


def _merge_ordered_lists(original: dict, patch: dict, schema: _Field) -> None:
    """Process ``$setElementOrder/<field>`` together with ``<field>`` (mergePatchIntoOriginal)."""
    for directive in [k for k in patch if k.startswith(_SET_ORDER)]:
        order = patch.pop(directive)
        if not isinstance(order, list):
            raise _internal(f"expected a []interface {{}}, but received {type(order).__name__}")
        name = _extract_key(directive, _SET_ORDER)
        in_original, in_patch = name in original, name in patch
        for present, value in ((in_original, original.get(name)), (in_patch, patch.get(name))):
            if present and not isinstance(value, list):
                raise _internal(f"expected a []interface {{}}, but received {type(value).__name__}")
        current: list[Any] = original[name] if in_original else []
        update: list[Any] = patch[name] if in_patch else []
        field = _sub(schema, name)
        key = field.key or ""
        _validate_order(update, order, key)
        merged: list[Any]
        if in_original and in_patch:
            merged = _merge_list(current, update, field, False) if field.key is not None else update
        elif in_patch:
            merged = _remove_directives(update)[0]
        elif in_original:
            merged = current
        else:
            continue
        elem = _element_kind(current, update)
        listed, server_only = _partition(merged, order, key)
        original[name] = _normalize_order(listed, server_only, order, current, key, elem)
        patch.pop(name, None)


def _validate_order(items: list, order: list, key: str) -> None:
    """The patch list must follow the relative order of the ``$setElementOrder`` list."""
    if not items or not order:
        return
    if key:
        items = [v for v in _require_maps(items) if v.get(_PATCH) != "delete"]
    i = j = 0
    while i < len(items) and j < len(order):
        if isinstance(items[i], dict) and _PATCH in items[i]:
            i += 1
            continue
        if _key_equal(items[i], order[j], key):
            i += 1
        j += 1
    if i < len(items):
        raise _internal(f"The order in patch list:\n{items}\n doesn't match {_SET_ORDER} list:\n{order}\n")


def _key_equal(left: Any, right: Any, key: str) -> bool:
    if not key:
        return _same(left, right)
    for item in (left, right):
        _require_key(_require_maps([item])[0], key)
    return _same(left[key], right[key])


def _require_maps(items: list) -> list[dict]:
    for item in items:
        if not isinstance(item, dict):
            raise _internal(f"expected a map[string]interface {{}}, but received {type(item).__name__}")
    return items


def _require_key(item: dict, key: str) -> dict:
    if key not in item:
        raise _internal(f"map: {item} does not contain declared merge key: {key}")
    return item


def _element_kind(*lists: list) -> str:
    types = {type(v) for items in lists for v in items}
    if not types:
        raise _internal("no elements in any of the given slices")
    if len(types) > 1:
        raise _internal(f"list element types are not identical: {list(lists)}")
    if list in types:
        raise _invalid("lists of lists are not supported")
    return "map" if dict in types else "scalar"


def _merge_list(original: list, patch: list, field: _Field, delete_list: bool) -> list:
    """mergeSlice: merge by key (maps) or as a set (primitives), then restore a stable order."""
    if not original and not patch:
        return original
    elem = _element_kind(original, patch)
    key = field.key or ""
    if elem == "scalar":
        if delete_list:
            return [v for v in original if not any(_same(v, d) for d in patch)]
        merged = _dedupe(original + patch)
    else:
        if not key:
            raise _internal("cannot merge lists without merge key")
        original, patch = _apply_list_directives(_require_maps(original), _require_maps(patch), key)
        merged = list(original)
        for item in patch:
            idx = _find(merged, key, _require_key(item, key)[key])
            if idx is None:
                merged.append(item)
            else:
                merged[idx] = _merge_map(merged[idx], item, field)
    listed, server_only = _partition(merged, patch, key)
    return _normalize_order(listed, server_only, patch, original, key, elem)


def _apply_list_directives(original: list, patch: list, key: str) -> tuple[list, list]:
    """``$patch: delete`` removes items by merge key; ``$patch: replace`` makes the patch the list."""
    plain, replace = [], False
    for item in patch:
        if _PATCH not in item:
            plain.append(item)
        elif item[_PATCH] == "delete":
            _require_key(item, key)
            original = [o for o in original if not (key in o and _same(o[key], item[key]))]
        elif item[_PATCH] == "replace":
            replace = True
        elif item[_PATCH] == "merge":
            raise _internal("merging lists cannot yet be specified in the patch")
        else:
            raise _internal(f"unknown patch type: {item[_PATCH]} in map: {item}")
    return (plain, []) if replace else (original, plain)


def _find(items: list, key: str, value: Any) -> int | None:
    return next((i for i, item in enumerate(items) if key in item and _same(item[key], value)), None)


def _dedupe(items: list) -> list:
    out: list = []
    for item in items:
        if not any(_same(item, seen) for seen in out):
            out.append(item)
    return out


def _index(items: list, value: Any, key: str, elem: str) -> int:
    if elem == "map":
        target = value.get(key) if isinstance(value, dict) else None
        values = [v.get(key) if isinstance(v, dict) else None for v in items]
    else:
        target, values = value, items
    return next((i for i, v in enumerate(values) if _same(v, target)), -1)


def _partition(merged: list, by: list, key: str) -> tuple[list, list]:
    """Split into items named in ``by`` and server-only items, keeping their order."""
    named: list = []
    server_only: list = []
    for item in merged:
        if key:
            _require_key(_require_maps([item])[0], key)
            present = _find(_require_maps(by), key, item[key]) is not None
        else:
            present = _index(by, item, key, "scalar") >= 0
        (named if present else server_only).append(item)
    return named, server_only


def _sort_by(items: list, order: list, key: str, elem: str) -> list:
    if elem == "map":
        for item in _require_maps(items) + _require_maps(order):
            _require_key(item, key)
        deletes = [i for i in items if i.get(_PATCH) == "delete"]
        items = [i for i in items if i.get(_PATCH) != "delete"]
    else:
        deletes = []

    def rank(item: Any) -> int:
        idx = _index(order, item, key, elem)
        return idx if idx >= 0 else len(order)

    return sorted(items, key=rank) + deletes


def _normalize_order(
    listed: list, server_only: list, patch_order: list, server_order: list, key: str, elem: str
) -> list:
    """normalizeElementOrder: patch items keep the patch order, server-only items keep the live order,
    and a server-only item is placed before a patch item only if it came first in the live list."""
    right = _sort_by(listed, patch_order, key, elem)
    left = _sort_by(server_only, server_order, key, elem)
    out, i, j = [], 0, 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            take_left = True
        elif i >= len(left):
            take_left = False
        else:
            li, ri = _index(server_order, left[i], key, elem), _index(server_order, right[j], key, elem)
            take_left = 0 <= li < ri
        if take_left:
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    return out


def _discard_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _discard_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_discard_nulls(v) for v in value]
    return value


def _remove_directives(value: Any) -> tuple[Any, bool]:
    """A value taken from the patch where nothing exists to merge into: maps carrying ``$patch`` vanish."""
    if isinstance(value, dict):
        if _PATCH in value:
            return None, False
        out = {}
        for k, v in value.items():
            kept, keep = _remove_directives(v)
            if keep:
                out[k] = kept
        return out, True
    if isinstance(value, list):
        return [kept for kept, keep in map(_remove_directives, value) if keep], True
    return value, True


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
