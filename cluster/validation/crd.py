"""A CustomResourceDefinition's validation, the part the emulator checks
(staging/src/k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation/validation.go):

- ``metadata.name`` is ``<spec.names.plural>.<spec.group>``;
- every ``type`` in a version's ``openAPIV3Schema`` (through properties, items, additionalProperties, allOf, anyOf,
  oneOf, not) is one of the OpenAPI v3 types (``ValidateCustomResourceDefinitionOpenAPISchema``: ``openapiV3Types``);
- each ``additionalPrinterColumns`` entry has a name, a supported ``type`` and ``format`` and a JSONPath
  (``ValidateCustomResourceColumnDefinition``);
- each CEL rule (``x-kubernetes-validations``) compiles, its ``messageExpression`` too, its ``reason`` is supported
  and its ``fieldPath`` names a field (``cluster/validation/schema_cel.py`` ``rule_errors``).

Not checked here (accepted, possibly refused by a cluster): structural-schema completeness, defaults, the rules'
estimated cost, conversion, version names and storage flags.
"""

from __future__ import annotations

from typing import Any

from cluster.store import Obj
from cluster.validation.errors import invalid, not_supported, required
from cluster.validation.schema_cel import rule_errors

OPENAPI_TYPES = ["array", "boolean", "integer", "number", "object", "string"]
COLUMN_TYPES = ["boolean", "date", "integer", "number", "string"]
COLUMN_FORMATS = ["byte", "date", "date-time", "double", "float", "int32", "int64", "password"]


def _schema_errors(schema: Any, path: str) -> list[str]:
    if not isinstance(schema, dict):
        return []
    errors = []
    kind = schema.get("type")
    if kind not in (None, "") and kind not in OPENAPI_TYPES:
        errors.append(not_supported(f"{path}.type", kind, OPENAPI_TYPES))
    errors += rule_errors(schema, path)
    for name, child in sorted((schema.get("properties") or {}).items()) if isinstance(schema.get("properties"),
                                                                                     dict) else []:
        errors += _schema_errors(child, f"{path}.properties[{name}]")
    if isinstance(schema.get("items"), dict):
        errors += _schema_errors(schema["items"], f"{path}.items")
    if isinstance(schema.get("additionalProperties"), dict):
        errors += _schema_errors(schema["additionalProperties"], f"{path}.additionalProperties")
    for combinator in ("allOf", "anyOf", "oneOf"):
        for index, child in enumerate(schema.get(combinator) or [] if isinstance(schema.get(combinator), list)
                                      else []):
            errors += _schema_errors(child, f"{path}.{combinator}[{index}]")
    if isinstance(schema.get("not"), dict):
        errors += _schema_errors(schema["not"], f"{path}.not")
    return errors


def _column_errors(column: Any, path: str) -> list[str]:
    if not isinstance(column, dict):
        return [invalid(path, column, "must be an object")]
    errors = []
    if not column.get("name"):
        errors.append(required(f"{path}.name"))
    if not column.get("type"):
        errors.append(required(f"{path}.type"))
    elif column["type"] not in COLUMN_TYPES:
        errors.append(not_supported(f"{path}.type", column["type"], COLUMN_TYPES))
    if column.get("format") and column["format"] not in COLUMN_FORMATS:
        errors.append(not_supported(f"{path}.format", column["format"], COLUMN_FORMATS))
    if not column.get("jsonPath"):
        errors.append(required(f"{path}.jsonPath"))
    return errors


def _object(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def validate_crd(crd: Obj) -> list[str]:
    spec = _object(crd.get("spec"))
    names = _object(spec.get("names"))
    errors = []
    name = str((crd.get("metadata") or {}).get("name") or "")
    if name != f"{names.get('plural', '')}.{spec.get('group', '')}":
        errors.append(invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    for index, version in enumerate(spec.get("versions") or [] if isinstance(spec.get("versions"), list) else []):
        if not isinstance(version, dict):
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") if isinstance(version.get("schema"),
                                                                                    dict) else None
        errors += _schema_errors(schema, f"spec.versions[{index}].schema.openAPIV3Schema")
        for column_index, column in enumerate(version.get("additionalPrinterColumns") or []):
            errors += _column_errors(column, f"spec.versions[{index}].additionalPrinterColumns[{column_index}]")
    return errors
