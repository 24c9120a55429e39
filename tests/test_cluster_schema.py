"""A custom resource against its CRD's schema, and a CRD's own validation (cluster/validation/schema.py, crd.py):
the apiextensions-apiserver's pruning and the messages of its validator, unit by unit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.validation.crd import validate_crd
from cluster.validation.schema import prune, validate

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PODGROUP_CRD = yaml.safe_load((ROOT / "deploy" / "base" / "podgroup-crd.yaml").read_text())
SCHEMA = PODGROUP_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_pruning_keeps_what_the_schema_specifies() -> None:
    obj = {"apiVersion": "scheduling.kubenexus.io/v1alpha1", "kind": "PodGroup",
           "metadata": {"name": "g", "whatever": 1}, "spec": {"minMember": 2, "extra": True, "queue": None},
           "status": {"phase": "Pending", "nodes": ["a"], "shadowPlan": {"anything": {"goes": [1]}},
                      "conditions": [{"type": "Released", "status": "True", "unknown": 1}]},
           "top": "level"}
    assert prune(obj, SCHEMA) == {
        "apiVersion": "scheduling.kubenexus.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g", "whatever": 1},
        "spec": {"minMember": 2}, "status": {"phase": "Pending", "nodes": ["a"],
                                             "shadowPlan": {"anything": {"goes": [1]}},
                                             "conditions": [{"type": "Released", "status": "True"}]}}


def test_pruning_with_additional_properties_and_nullable() -> None:
    schema = {"type": "object", "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "maybe": {"type": "string", "nullable": True}, "never": {"type": "string"}}}
    assert prune({"labels": {"a": "b"}, "maybe": None, "never": None}, schema) == {"labels": {"a": "b"},
                                                                                   "maybe": None}


def errors(obj: Any, schema: Any = SCHEMA) -> list[str]:
    return validate(obj, schema)


def test_a_valid_podgroup() -> None:
    assert errors({"spec": {"minMember": 3, "scheduleTimeoutSeconds": 60, "queue": "team-a.gpu",
                            "priorityClassName": "high", "expectedMembers": 0},
                   "status": {"phase": "Running", "present": 3, "releasedAt": "2026-01-01T00:00:00Z",
                              "conditions": [{"type": "Released", "status": "True", "reason": "AllFit",
                                              "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z",
                                              "observedGeneration": 2}]}}) == []


@pytest.mark.parametrize(("obj", "error"), [
    ({}, "spec: Required value"),
    ({"spec": {}}, "spec.minMember: Required value"),
    ({"spec": {"minMember": 0}}, "spec.minMember: Invalid value: 0: spec.minMember in body should be greater than "
                                 "or equal to 1"),
    ({"spec": {"minMember": 2.5}}, "spec.minMember: Invalid value: 2.5: spec.minMember in body must be of type "
                                   'integer: "number"'),
    ({"spec": {"minMember": 1, "queue": "q" * 254}}, "spec.queue: Too long: may not be longer than 253"),
    ({"spec": {"minMember": 1}, "status": {"nodes": "a"}}, 'status.nodes: Invalid value: "a": status.nodes in body '
                                                           'must be of type array: "string"'),
    ({"spec": {"minMember": 1}, "status": {"conditions": [
        {"type": "TimedOut", "status": "Maybe", "reason": "R", "message": "m",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
     'status.conditions[0].status: Unsupported value: "Maybe": supported values: "True", "False", "Unknown"'),
])
def test_invalid_podgroups(obj: dict[str, Any], error: str) -> None:
    assert errors(obj) == [error]


def test_list_types() -> None:
    schema = {"type": "object", "properties": {
        "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}, "maxItems": 2}}}
    assert errors({"set": ["a", "b", "a"]}, schema) == ["set: Too many: 3: must have at most 2 items",
                                                        'set[2]: Duplicate value: "a"']


def test_int_or_string_and_exclusive_bounds() -> None:
    schema = {"type": "object", "properties": {"port": {"x-kubernetes-int-or-string": True},
                                               "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True,
                                                         "maximum": 1}}}
    assert errors({"port": "http", "ratio": 0.5}, schema) == []
    assert errors({"port": True, "ratio": 0}, schema) == [
        'port: Invalid value: true: port in body must be of type integer,string: "boolean"',
        "ratio: Invalid value: 0: ratio in body should be greater than 0"]


def test_the_podgroup_crd_is_valid() -> None:
    assert validate_crd(PODGROUP_CRD) == []


def test_crd_validation() -> None:
    crd = yaml.safe_load((ROOT / "deploy" / "base" / "podgroup-crd.yaml").read_text())
    crd["metadata"]["name"] = "groups.scheduling.kubenexus.io"
    version = crd["spec"]["versions"][0]
    version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["nodes"]["items"]["type"] = "string'"
    version["additionalPrinterColumns"].append({"name": "Bad", "type": "text", "jsonPath": ".x", "format": "uuid"})
    version["additionalPrinterColumns"].append({"type": "string"})
    supported = '"array", "boolean", "integer", "number", "object", "string"'
    assert validate_crd(crd) == [
        'metadata.name: Invalid value: "groups.scheduling.kubenexus.io": must be spec.names.plural+"."+spec.group',
        "spec.versions[0].schema.openAPIV3Schema.properties[status].properties[nodes].items.type: Unsupported "
        f"value: \"string'\": supported values: {supported}",
        'spec.versions[0].additionalPrinterColumns[6].type: Unsupported value: "text": supported values: "boolean", '
        '"date", "integer", "number", "string"',
        'spec.versions[0].additionalPrinterColumns[6].format: Unsupported value: "uuid": supported values: "byte", '
        '"date", "date-time", "double", "float", "int32", "int64", "password"',
        "spec.versions[0].additionalPrinterColumns[7].name: Required value",
        "spec.versions[0].additionalPrinterColumns[7].jsonPath: Required value"]
