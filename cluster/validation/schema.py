"""A custom resource against its CRD version's structural schema: pruning, then validation.

Ported from the apiextensions-apiserver (read the source, not memory):

  pkg/apiserver/schema/pruning/algorithm.go    fields the schema does not specify are dropped on every write
      (unless ``x-kubernetes-preserve-unknown-fields: true``, or an ``additionalProperties`` schema, says keep
      them); ``apiVersion``, ``kind`` and ``metadata`` at the root are always kept
  pkg/apiserver/schema/defaulting/prunenulls.go    a null where the schema does not say ``nullable: true`` is
      dropped
  pkg/apiserver/validation/validation.go       ``ValidateCustomResource``: kube-openapi's validator, its errors as
      field errors: ``Required value``; ``Unsupported value: "x": supported values: ...`` (enum); ``Invalid value:
      "x": <path> in body must be of type integer: "string"``; ``Invalid value: 0: <path> in body should be greater
      than or equal to 1`` (minimum, maximum, exclusive), ``... should match '<pattern>'``, ``... must be of type
      date-time: "x"``; ``Too long: may not be longer than 253`` (maxLength), ``Too many: 3: must have at most 2
      items`` (maxItems); ``x-kubernetes-list-type: map`` keys and ``set`` items ``Duplicate value``

  pkg/apiserver/schema/defaulting/algorithm.go    ``Default``: a property's ``default`` (a deep copy) where the
      property is absent, or null and not nullable, then the same below, so a defaulted object gets its own
      properties' defaults; as the request is decoded (before the webhooks) and again for what they return. Not
      on reads of objects stored before a default was added.

Validation by the x-kubernetes-int-or-string type, then by the other keywords as any value's (a string's
``pattern``, an integer's ``minimum``). ``maxProperties``: ``Too many: 3: must have at most 2 items``;
``minProperties``: ``Invalid value: ...: <path> in body should have at least 1 properties``. CEL rules
(``x-kubernetes-validations``): ``cluster/validation/schema_cel.py``.

Not ported (accepted here, possibly refused by a cluster): ``oneOf``/``anyOf``/``allOf``/``not``, ``multipleOf``,
formats other than ``date-time``, ``x-kubernetes-embedded-resource``.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from typing import Any

from cluster.validation.errors import duplicate, invalid, not_supported, required

Obj = dict[str, Any]
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (isinstance(value, float)
                                                                          and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return expected is None or isinstance(value, expected)


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# --- pruning ----------------------------------------------------------------------------------------------------


def prune(obj: Any, schema: Any, root: bool = True) -> Any:
    """``obj`` without the fields ``schema`` does not specify, and without nulls it does not allow."""
    if not isinstance(schema, dict):
        return obj
    if isinstance(obj, dict):
        properties: Obj = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        additional = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") is True
        pruned = {}
        for key, value in obj.items():
            if root and key in ("apiVersion", "kind", "metadata"):
                pruned[key] = value
                continue
            if key in properties:
                child = properties[key]
            elif isinstance(additional, dict):
                child = additional
            elif keep_unknown or additional is True:
                pruned[key] = value
                continue
            else:
                continue  # not in the schema: dropped
            if value is None and not (isinstance(child, dict) and child.get("nullable")):
                continue
            pruned[key] = prune(value, child, root=False)
        return pruned
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"], root=False) for item in obj]
    return obj


# --- defaulting ---------------------------------------------------------------------------------------------------


def _or_default(value: Any, schema: Any) -> Any:
    """``value``, or a copy of ``schema``'s default where it is null and ``schema`` not nullable (isNonNullableNull)."""
    if value is None and isinstance(schema, dict) and not schema.get("nullable") and "default" in schema:
        return copy.deepcopy(schema["default"])
    return value


def default(obj: Any, schema: Any) -> None:
    """Fill in ``obj``'s defaults from ``schema``, in place."""
    if not isinstance(schema, dict):
        return
    if isinstance(obj, dict):
        properties: Obj = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        for name, child in properties.items():
            if name not in obj and isinstance(child, dict) and "default" in child:
                obj[name] = copy.deepcopy(child["default"])
        for name, value in obj.items():
            child = properties[name] if name in properties else schema.get("additionalProperties")
            obj[name] = value = _or_default(value, child)
            default(value, child)
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            obj[index] = item = _or_default(item, schema.get("items"))
            default(item, schema.get("items"))


# --- validation -------------------------------------------------------------------------------------------------


def _time_ok(value: str) -> bool:
    try:
        datetime.datetime.fromisoformat(value)
    except ValueError:
        return False
    return "T" in value.upper()


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def validate(obj: Any, schema: Any, path: str = "") -> list[str]:  # noqa: C901, PLR0912 (one check per keyword)
    """The field errors of ``obj`` against ``schema`` (paths relative to the object: ``spec.minMember``)."""
    if not isinstance(schema, dict) or obj is None:
        return []
    errors: list[str] = []
    kind = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(obj, str) or _is(obj, "integer")):
            return [invalid(path, obj, f'{path} in body must be of type integer,string: "{_json_type(obj)}"')]
    elif kind and not _is(obj, kind):
        return [invalid(path, obj, f'{path} in body must be of type {kind}: "{_json_type(obj)}"')]
    if "enum" in schema and isinstance(schema["enum"], list) and obj not in schema["enum"]:
        errors.append(not_supported(path, obj, [v if isinstance(v, str) else json.dumps(v) for v in schema["enum"]]))
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        if "minimum" in schema:
            low = schema["minimum"]
            if obj < low or (schema.get("exclusiveMinimum") and obj == low):
                relation = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
                errors.append(invalid(path, obj, f"{path} in body should be {relation} {_number(low)}"))
        if "maximum" in schema:
            high = schema["maximum"]
            if obj > high or (schema.get("exclusiveMaximum") and obj == high):
                relation = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
                errors.append(invalid(path, obj, f"{path} in body should be {relation} {_number(high)}"))
    if isinstance(obj, str):
        if "maxLength" in schema and len(obj) > schema["maxLength"]:
            errors.append(f"{path}: Too long: may not be longer than {schema['maxLength']}")
        if "minLength" in schema and len(obj) < schema["minLength"]:
            errors.append(invalid(path, obj, f"{path} in body should be at least {schema['minLength']} chars long"))
        if isinstance(schema.get("pattern"), str) and re.search(schema["pattern"], obj) is None:
            errors.append(invalid(path, obj, f"{path} in body should match '{schema['pattern']}'"))
        if schema.get("format") == "date-time" and not _time_ok(obj):
            errors.append(invalid(path, obj, f'{path} in body must be of type date-time: "{obj}"'))
    if isinstance(obj, list):
        if "maxItems" in schema and len(obj) > schema["maxItems"]:
            errors.append(f"{path}: Too many: {len(obj)}: must have at most {schema['maxItems']} items")
        if "minItems" in schema and len(obj) < schema["minItems"]:
            errors.append(invalid(path, obj, f"{path} in body should have at least {schema['minItems']} items"))
        errors += _list_type(obj, schema, path)
        for index, item in enumerate(obj):
            errors += validate(item, schema.get("items"), f"{path}[{index}]")
    if isinstance(obj, dict):
        if "maxProperties" in schema and len(obj) > schema["maxProperties"]:
            errors.append(f"{path}: Too many: {len(obj)}: must have at most {schema['maxProperties']} items")
        if "minProperties" in schema and len(obj) < schema["minProperties"]:
            errors.append(invalid(path, obj, f"{path} in body should have at least {schema['minProperties']} "
                                             "properties"))
        properties: Obj = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        for name in schema.get("required") or []:
            if name not in obj:
                errors.append(required(_child(path, name)))
        for key, value in obj.items():
            child = properties.get(key, schema.get("additionalProperties"))
            errors += validate(value, child, _child(path, key))
    return errors


def _list_type(items: list[Any], schema: Obj, path: str) -> list[str]:
    kind = schema.get("x-kubernetes-list-type")
    seen: list[Any] = []
    errors = []
    for index, item in enumerate(items):
        if kind == "map" and isinstance(item, dict):
            key = {k: item.get(k) for k in schema.get("x-kubernetes-list-map-keys") or []}
        elif kind == "set":
            key = item
        else:
            return []
        if key in seen:
            errors.append(duplicate(f"{path}[{index}]", key))
        seen.append(key)
    return errors

