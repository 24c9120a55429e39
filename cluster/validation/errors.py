"""Field errors rendered like k8s.io/apimachinery/pkg/util/validation/field: ``field.Error.Error()`` is
``<path>: <Type>[: <value>][: <detail>]``, and a list of them becomes one 422 message."""

from __future__ import annotations

import json
from typing import Any

from cluster.quantity import Quantity


def printed(value: Any) -> str:
    """The bad value as ErrorBody prints it: %q for strings, %v for scalars, JSON for structures."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Quantity):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {printed(value)}: {detail}"


def required(path: str, detail: str = "") -> str:
    return f"{path}: Required value: {detail}" if detail else f"{path}: Required value"


def forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


def duplicate(path: str, value: Any) -> str:
    return f"{path}: Duplicate value: {printed(value)}"


def not_supported(path: str, value: Any, supported: list[str]) -> str:
    return f"{path}: Unsupported value: {printed(value)}: supported values: " + ", ".join(f'"{s}"' for s in supported)


def unique(errors: list[str]) -> list[str]:
    """ErrorList.ToAggregate drops repeated messages (ValidatePodUpdate validates metadata twice)."""
    return list(dict.fromkeys(errors))


_REASONS = {"Invalid value": "FieldValueInvalid", "Required value": "FieldValueRequired",
            "Unsupported value": "FieldValueNotSupported", "Forbidden": "FieldValueForbidden",
            "Duplicate value": "FieldValueDuplicate", "Too long": "FieldValueTooLong", "Too many": "FieldValueTooMany",
            "Not found": "FieldValueNotFound", "Internal error": "InternalError"}


def causes(errors: list[str]) -> list[dict[str, str]]:
    """The 422 Status's ``details.causes`` (``errors.NewInvalid``): per error its type as ``reason``, its body
    (without the path) as ``message`` and its path as ``field``, which kubectl prints as ``<field>: <message>``."""
    found = []
    for error in errors:
        field, _, body = error.partition(": ")
        reason = next((r for prefix, r in _REASONS.items() if body.startswith(prefix)), "FieldValueInvalid")
        found.append({"reason": reason, "message": body, "field": field})
    return found


def invalid_message(kind: str, name: str, errors: list[str]) -> str:
    """The 422 Status message: ``errors.NewInvalid`` (one error bare, several in brackets)."""
    detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'{kind} "{name}" is invalid: {detail}'
