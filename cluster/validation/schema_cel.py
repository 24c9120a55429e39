"""A custom resource against its CRD's CEL validation rules (``x-kubernetes-validations``).

Ported from the apiextensions-apiserver and the apiserver's CEL package (read the source, not memory):

  pkg/apiserver/schema/cel/validation.go       ``Validator.validate``: a node's rules, then its additionalProperties,
      properties and items, only for non-null values; ``self`` is the node's value, ``oldSelf`` its correlated old
      value (the same property or map key; of a list, only an ``x-kubernetes-list-type: map`` item with the same
      keys), and a rule reading ``oldSelf`` (a transition rule) is skipped where there is none. A rule that is not
      true is ``field.Invalid(path, <the node's type>, detail)``, so ``spec: Invalid value: "object": <detail>``
      (the root's path is ``<nil>``): detail is the ``messageExpression``'s value when it evaluates to a
      non-empty string without line breaks, else ``message``, else ``failed rule: <rule>``; ``fieldPath`` moves the
      error below the node, ``reason`` makes it Forbidden, Required or Duplicate. An evaluation error is
      ``<error> evaluating rule: <message or rule>`` (``'no such overload': call arguments did not match a
      supported operator, function or macro signature for rule: ...``)
  pkg/apiserver/schema/cel/model/schemas.go, values.go    what ``self`` holds: an object's declared properties
      (``apiVersion``, ``kind``, ``metadata.name`` and ``metadata.generateName`` at the root), a map for
      ``additionalProperties``, ``date-time``/``date`` strings as timestamps, ``duration`` as durations, ``byte``
      as bytes, ``number`` as doubles; int-or-string as it is
  k8s.io/apiserver/pkg/cel/escaping.go         property names as CEL identifiers (``__dash__``, ``__dot__``, ...)
  pkg/registry/customresource/strategy.go      ``hasBlockingErr``: after a required, unsupported, too long, too
      many or wrongly typed value the rules are not run, and one error says so
  pkg/apis/apiextensions/validation/validation.go    a CRD's rules compile (``rule``, ``messageExpression``),
      ``reason`` is a supported one and ``fieldPath`` names a field of the schema (``rule_errors``)

Not ported (accepted here, possibly refused by a cluster): cost estimates and budgets, ratcheting of unchanged
invalid values (CRDValidationRatcheting: a warning there, an error here), ``optionalOldSelf``, rules under
``allOf``, type checking at compile time (a field the schema lacks fails at evaluation, as a missing one), the
set semantics of equality for ``x-kubernetes-list-type: set``/``map`` lists, ``x-kubernetes-embedded-resource``
roots. The CEL environment is ``cluster/cel.py``'s.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from cluster import cel
from cluster.validation.errors import duplicate, forbidden, invalid, not_supported, required

Obj = dict[str, Any]


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


_PROGRAMS = cel.Programs(frozenset({"self", "oldSelf"}))
_RESERVED = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
                       "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"})
_EXPAND = re.compile(r"(__|[-./]|[^a-zA-Z0-9-./_])")
_ESCAPES = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
REASONS = ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"]
MAX_MESSAGE_BYTES = 5 * 1024  # celconfig.MaxEvaluatedMessageExpressionSizeBytes
_BLOCKING = re.compile(r": (Unsupported value|Required value|Too long|Too many)\b| in body must be of type ")
NOT_CHECKED = ('<nil>: Invalid value: "null": some validation rules were not checked because the object was '
               "invalid; correct the existing errors to complete validation")


def escape(name: str) -> str | None:
    """A property name as a CEL identifier (escaping.go ``Escape``), or None when it has none (not exposed)."""
    if not name or name[0].isdigit():
        return None
    if name in _RESERVED:
        return f"__{name}__"
    unsupported = False

    def expand(match: re.Match[str]) -> str:
        nonlocal unsupported
        if match.group(0) not in _ESCAPES:
            unsupported = True
        return _ESCAPES.get(match.group(0), "")

    escaped = _EXPAND.sub(expand, name)
    return None if unsupported else escaped


# --- values -------------------------------------------------------------------------------------------------------


def _string(value: str, schema: Obj) -> Any:
    types = cel.celpy().celtypes
    try:
        if schema.get("format") in ("date-time", "date"):
            return types.TimestampType(value if "T" in value else f"{value}T00:00:00Z")
        if schema.get("format") == "duration":
            return types.DurationType(value)
        if schema.get("format") == "byte":
            return types.BytesType(base64.b64decode(value))
    except (ValueError, TypeError):
        pass  # the schema's own validation refuses it
    return types.StringType(value)


def value_of(obj: Any, schema: Any, root: bool = False) -> Any:
    """``obj`` as a rule on ``schema`` sees it (``UnstructuredToVal``)."""
    types = cel.celpy().celtypes
    if obj is None or not isinstance(schema, dict) or schema.get("x-kubernetes-int-or-string"):
        return cel.to_cel(obj)
    if isinstance(obj, dict):
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            return types.MapType({types.StringType(k): value_of(v, additional) for k, v in obj.items()})
        properties = _dict(schema.get("properties"))
        fields = {}
        for name, value in obj.items():
            if name in properties and (identifier := escape(name)) is not None:
                fields[types.StringType(identifier)] = value_of(value, properties[name])
        if root:
            meta = _dict(obj.get("metadata"))
            fields.update({types.StringType(k): types.StringType(str(obj[k])) for k in ("apiVersion", "kind")
                           if k in obj})
            fields[types.StringType("metadata")] = types.MapType({
                types.StringType(k): types.StringType(str(meta[k])) for k in ("name", "generateName") if k in meta})
        return types.MapType(fields)
    if isinstance(obj, list):
        return types.ListType([value_of(item, schema.get("items")) for item in obj])
    if isinstance(obj, str):
        return _string(obj, schema)
    if schema.get("type") == "number" and isinstance(obj, int | float) and not isinstance(obj, bool):
        return types.DoubleType(obj)
    return cel.to_cel(obj)


# --- validation ---------------------------------------------------------------------------------------------------


def has_rules(schema: Any) -> bool:
    """Whether ``schema`` or a schema below it has rules (``hasXValidations``)."""
    if not isinstance(schema, dict):
        return False
    if schema.get("x-kubernetes-validations"):
        return True
    properties = _dict(schema.get("properties"))
    return (any(has_rules(child) for child in properties.values()) or has_rules(schema.get("items"))
            or has_rules(schema.get("additionalProperties")))


def validate(obj: Obj, old: Obj | None, schema: Any, earlier: list[str]) -> list[str]:
    """The errors of the rules in ``schema`` for ``obj`` (an update's ``old`` object for transition rules), or the
    one that says they were not checked when ``earlier`` (the schema's own errors) has a blocking one."""
    if not has_rules(schema):
        return []
    if any(_BLOCKING.search(error) for error in earlier):
        return [NOT_CHECKED]
    return _node(obj, old, schema, None, root=True)


def _child(path: str | None, name: str) -> str:
    return f"{path}.{name}" if path else name


def _old_items(schema: Obj, old: Any) -> dict[tuple[Any, ...], Any]:
    """An ``x-kubernetes-list-type: map`` list's old items by their keys (other lists correlate nothing)."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return {}
    keys = schema.get("x-kubernetes-list-map-keys") or []
    return {tuple(item.get(k) for k in keys): item for item in old if isinstance(item, dict)}


def _node(obj: Any, old: Any, schema: Any, path: str | None, root: bool = False) -> list[str]:
    if obj is None or not isinstance(schema, dict):
        return []
    errors = _rules(obj, old, schema, path, root)
    if isinstance(obj, dict):
        correlated = old if isinstance(old, dict) and schema.get("x-kubernetes-map-type") in (
            None, "granular", "atomic") else {}
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key, value in obj.items():
                errors += _node(value, correlated.get(key), additional, f"{path or ''}[{key}]")
        properties = _dict(schema.get("properties"))
        for key, value in obj.items():
            if key in properties:
                errors += _node(value, correlated.get(key), properties[key], _child(path, key))
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        olds = _old_items(schema, old)
        keys = schema.get("x-kubernetes-list-map-keys") or []
        for index, item in enumerate(obj):
            previous = olds.get(tuple(item.get(k) for k in keys)) if isinstance(item, dict) else None
            errors += _node(item, previous, schema["items"], f"{path or ''}[{index}]")
    return errors


def _shown(rule: Obj) -> str:
    """``ruleErrorString``: the rule's message, else its text."""
    return str(rule.get("message") or "").strip() or str(rule.get("rule") or "").strip()


def _message(rule: Obj, activation: dict[str, Any]) -> str:
    """The detail of a rule that is not true: its messageExpression's value, else its message, else the default."""
    expression = str(rule.get("messageExpression") or "").strip()
    if expression:
        try:
            value = cel.evaluate(_PROGRAMS.compile(expression), activation)
        except cel.CelError:
            value = None  # the apiserver logs it and falls back to the message
        text = str(value).strip() if isinstance(value, str) else ""
        if text and "\n" not in text and len(text.encode()) <= MAX_MESSAGE_BYTES:
            return text
    message = str(rule.get("message") or "").strip()
    return message or f"failed rule: {_shown(rule)}"


def _rules(obj: Any, old: Any, schema: Obj, path: str | None, root: bool) -> list[str]:
    rules = schema.get("x-kubernetes-validations")
    if not isinstance(rules, list) or not rules:
        return []
    kind = "" if schema.get("x-kubernetes-int-or-string") else str(schema.get("type") or "")
    here = path or "<nil>"
    activation = {"self": value_of(obj, schema, root)}
    if old is not None:
        activation["oldSelf"] = value_of(old, schema, root)
    errors = []
    for rule in (r for r in rules if isinstance(r, dict)):
        text = str(rule.get("rule") or "").strip()
        if not text:
            continue
        try:
            compiled = _PROGRAMS.compile(text)
        except cel.CelError as exc:
            errors.append(invalid(here, kind, f"rule compile error: {exc}"))
            continue
        if "oldSelf" in compiled.reads and old is None:
            continue  # a transition rule, and nothing to compare with
        try:
            result = cel.evaluate(compiled, activation)
        except cel.CelError as exc:
            if str(exc).startswith("no such overload"):
                detail = (f"'{exc}': call arguments did not match a supported operator, function or macro signature "
                          f"for rule: {_shown(rule)}")
            else:
                detail = f"{exc} evaluating rule: {_shown(rule)}"
            errors.append(invalid(here, kind, detail))
            continue
        if result is True or (isinstance(result, cel.celpy().celtypes.BoolType) and bool(result)):
            continue
        field_path = normalized_field_path(str(rule.get("fieldPath") or ""), schema)
        where = (f"{path}.{field_path}" if path else field_path) if field_path else here
        errors.append(_error(where, kind, _message(rule, activation), rule.get("reason")))
    return errors


def _error(path: str, kind: str, detail: str, reason: Any) -> str:
    """``fieldErrorForReason``."""
    if reason == "FieldValueForbidden":
        return forbidden(path, detail)
    if reason == "FieldValueRequired":
        return required(path, detail)
    if reason == "FieldValueDuplicate":
        return duplicate(path, kind)
    return invalid(path, kind, detail)


# --- the rules of a CRD's schema ----------------------------------------------------------------------------------

_PATH_TOKEN = re.compile(r"\.([^.\[\]]+)|\['((?:[^'\\]|\\.)*)'\]")


def _field_path(field_path: str, schema: Any) -> tuple[str | None, str]:
    """``ValidFieldPath``: the normalized path (``spec.limits[cpu]``) of a rule's fieldPath below ``schema``, or
    None and why it is not one."""
    normalized, position, node = "", 0, schema
    while position < len(field_path):
        match = _PATH_TOKEN.match(field_path, position)
        if match is None:
            return None, f"expected [ or . but got: {field_path[position:]}"
        name = match.group(1) if match.group(1) is not None else re.sub(r"\\(.)", r"\1", match.group(2))
        properties = node.get("properties") if isinstance(node, dict) else None
        additional = node.get("additionalProperties") if isinstance(node, dict) else None
        if isinstance(properties, dict):
            if name not in properties:
                return None, "does not refer to a valid field"
            normalized, node = _child(normalized, name), properties[name]
        elif isinstance(additional, dict):
            normalized, node = f"{normalized}[{name}]", additional
        else:
            return None, "does not refer to a valid field"
        position = match.end()
    return normalized, ""


def normalized_field_path(field_path: str, schema: Any) -> str:
    """A rule's fieldPath as the error path below its node ("" for none, or one that is not valid)."""
    return (_field_path(field_path, schema)[0] or "") if field_path else ""


def _go_rule(rule: Obj) -> str:
    """The rule as the apiserver prints it in a CRD's field errors (Go's %#v of apiextensions.ValidationRule)."""
    def quoted(key: str) -> str:
        return '"' + str(rule.get(key) or "").replace("\\", "\\\\").replace('"', '\\"') + '"'

    reason = rule.get("reason")
    shown_reason = f'(*apiextensions.FieldValueErrorReason)("{reason}")' if reason else \
        "(*apiextensions.FieldValueErrorReason)(nil)"
    optional = rule.get("optionalOldSelf")
    shown_optional = f"(*bool)({str(optional).lower()})" if isinstance(optional, bool) else "(*bool)(nil)"
    return (f"apiextensions.ValidationRule{{Rule:{quoted('rule')}, Message:{quoted('message')}, "
            f"MessageExpression:{quoted('messageExpression')}, Reason:{shown_reason}, "
            f"FieldPath:{quoted('fieldPath')}, OptionalOldSelf:{shown_optional}}}")


def rule_errors(schema: Obj, path: str) -> list[str]:
    """The errors of the rules of one schema node of a CRD (``path`` is the node's): each compiles, its reason is
    supported, its fieldPath names a field."""
    rules = schema.get("x-kubernetes-validations")
    if rules is None:
        return []
    if not isinstance(rules, list):
        return [invalid(f"{path}.x-kubernetes-validations", rules, "must be a list")]
    errors = []
    for index, rule in enumerate(rules):
        where = f"{path}.x-kubernetes-validations[{index}]"
        rule = rule if isinstance(rule, dict) else {}
        text = str(rule.get("rule") or "").strip()
        if not text:
            errors.append(required(f"{where}.rule"))
        for key in ("rule", "messageExpression"):
            expression = str(rule.get(key) or "").strip()
            if expression:
                try:
                    _PROGRAMS.compile(expression)
                except cel.CelError as exc:
                    errors.append(f"{where}.{key}: Invalid value: {_go_rule(rule)}: {exc}")
        reason = rule.get("reason")
        if reason is not None and reason not in REASONS:
            errors.append(not_supported(f"{where}.reason", reason, REASONS))
        if rule.get("fieldPath"):
            _, problem = _field_path(str(rule["fieldPath"]), schema)
            if problem:
                errors.append(invalid(f"{where}.fieldPath", rule["fieldPath"], f"fieldPath must be a valid path: "
                                                                                 f"{problem}"))
    return errors
