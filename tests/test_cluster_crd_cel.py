"""CRD validation rules (``x-kubernetes-validations``) and schema defaults on the local cluster
(cluster/validation/schema_cel.py, schema.py ``default``, crd.py): what ``self`` and ``oldSelf`` are at each node,
the apiserver's error for a rule that is not true (path, the node's type as the value, message, messageExpression,
fieldPath, reason), evaluation errors, transition rules, the rules left unchecked after a blocking schema error, a
CRD whose rules do not compile; then the same end to end through the API.

Schemas here are made up for each case: the mechanism is the apiextensions-apiserver's, not any one CRD's.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from cluster.local import LocalCluster
from cluster.validation.crd import validate_crd
from cluster.validation.schema import default, validate
from cluster.validation.schema_cel import NOT_CHECKED, escape
from cluster.validation.schema_cel import validate as validate_rules
from tests.support.polling import wait_for

Obj = dict[str, Any]


def obj_schema(properties: Obj, *rules: Obj, **more: Any) -> Obj:
    schema: Obj = {"type": "object", "properties": properties, **more}
    if rules:
        schema["x-kubernetes-validations"] = list(rules)
    return schema


def root(spec_schema: Obj, *rules: Obj) -> Obj:
    return obj_schema({"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
                       "spec": spec_schema}, *rules)


def errors(obj: Obj, schema: Obj, old: Obj | None = None) -> list[str]:
    """The schema's errors then the rules', as the custom resource strategy gathers them."""
    found = validate(obj, schema)
    return found + validate_rules(obj, old, schema, found)


STRING, INT = {"type": "string"}, {"type": "integer"}
QUANTITIES = {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": True}}


@pytest.mark.unit
@pytest.mark.parametrize(("rule", "expected"), [
    ({"rule": "self.low <= self.high"}, 'spec: Invalid value: "object": failed rule: self.low <= self.high'),
    ({"rule": "self.low <= self.high", "message": " low must not exceed high "},
     'spec: Invalid value: "object": low must not exceed high'),
    ({"rule": "self.low <= self.high", "message": "m", "messageExpression": "'low ' + string(self.low) + ' > high'"},
     'spec: Invalid value: "object": low 5 > high'),
    # a messageExpression that fails, or is no string, or spans lines: the message (else the default) instead
    ({"rule": "self.low <= self.high", "message": "m", "messageExpression": "self.missing"},
     'spec: Invalid value: "object": m'),
    ({"rule": "self.low <= self.high", "messageExpression": "self.low"},
     'spec: Invalid value: "object": failed rule: self.low <= self.high'),
    ({"rule": "self.low <= self.high", "message": "m", "messageExpression": "'a\\nb'"},
     'spec: Invalid value: "object": m'),
    ({"rule": "self.low <= self.high", "fieldPath": ".low", "message": "m"}, 'spec.low: Invalid value: "object": m'),
    ({"rule": "self.low <= self.high", "reason": "FieldValueForbidden", "message": "m"}, "spec: Forbidden: m"),
    ({"rule": "self.low <= self.high", "reason": "FieldValueRequired", "message": "m"}, "spec: Required value: m"),
    ({"rule": "self.low <= self.high", "reason": "FieldValueDuplicate", "message": "m"},
     'spec: Duplicate value: "object"'),
    # evaluation errors name the rule's message, else its text
    ({"rule": "self.absent > 1"},
     'spec: Invalid value: "object": no such key: absent evaluating rule: self.absent > 1'),
    ({"rule": "self.low / (self.high - self.high) > 0", "message": "m"},
     'spec: Invalid value: "object": division by zero evaluating rule: m'),
])
def test_a_rule_that_is_not_true_is_an_error_of_its_node(rule: Obj, expected: str) -> None:
    schema = root(obj_schema({"low": INT, "high": INT}, rule))
    assert errors({"spec": {"low": 5, "high": 2}}, schema) == [expected]
    assert errors({"spec": {"low": 1, "high": 2}}, schema) == ([] if "absent" not in rule["rule"]
                                                               and "/" not in rule["rule"] else [expected])


@pytest.mark.unit
def test_the_root_sees_its_name_and_kind_and_its_errors_have_no_path() -> None:
    schema = root(obj_schema({}), {"rule": "self.metadata.name.startsWith('team-') && self.kind == 'Thing'",
                                   "message": "names start with team-"})
    obj = {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x", "labels": {"a": "b"}},
           "spec": {}}
    assert errors(obj, schema) == ['<nil>: Invalid value: "object": names start with team-']
    obj["metadata"]["name"] = "team-a"
    assert errors(obj, schema) == []
    # only name and generateName of the metadata
    labels = root(obj_schema({}), {"rule": "has(self.metadata.labels)"})
    assert errors(obj, labels) == ['<nil>: Invalid value: "object": failed rule: has(self.metadata.labels)']


@pytest.mark.unit
def test_map_values_list_items_and_map_keys() -> None:
    rule = {"rule": "self.all(k, k.matches('^[a-z]+$'))", "messageExpression":
            "'not names: ' + self.filter(k, !k.matches('^[a-z]+$')).join(', ')"}
    limits = {**QUANTITIES, "x-kubernetes-validations": [rule]}
    limits["additionalProperties"] = {"x-kubernetes-int-or-string": True,
                                      "x-kubernetes-validations": [{"rule": "type(self) == string || self >= 0"}]}
    items = {"type": "array", "items": obj_schema({"n": INT}, {"rule": "self.n % 2 == 0", "message": "even"})}
    schema = root(obj_schema({"limits": limits, "items": items}))
    obj = {"spec": {"limits": {"cpu": -1, "Bad_1": "2", "x/y": 1}, "items": [{"n": 2}, {"n": 3}]}}
    assert errors(obj, schema) == [
        'spec.limits: Invalid value: "object": not names: Bad_1, x/y',
        'spec.limits[cpu]: Invalid value: "": failed rule: type(self) == string || self >= 0',
        'spec.items[1]: Invalid value: "object": even']


@pytest.mark.unit
def test_an_operator_on_the_wrong_types_is_no_such_overload() -> None:
    schema = root(obj_schema({"q": {"x-kubernetes-int-or-string": True, "x-kubernetes-validations": [
        {"rule": "self > 1", "message": "more than one"}]}}))
    assert errors({"spec": {"q": 5}}, schema) == []
    assert errors({"spec": {"q": "5"}}, schema) == [
        "spec.q: Invalid value: \"\": 'no such overload': call arguments did not match a supported operator, "
        "function or macro signature for rule: more than one"]


@pytest.mark.unit
def test_property_names_are_escaped_and_formats_typed() -> None:
    assert (escape("x-y"), escape("a.b/c"), escape("a__b"), escape("namespace"), escape("1x"), escape("a b")) == (
        "x__dash__y", "a__dot__b__slash__c", "a__underscores__b", "__namespace__", None, None)
    schema = root(obj_schema({"x-y": INT, "namespace": STRING, "at": {"type": "string", "format": "date-time"},
                              "ratio": {"type": "number"}, "for": {"type": "string", "format": "duration"}},
                             {"rule": "self.x__dash__y == 1 && self.__namespace__ == 'n' && "
                                      "self.at < timestamp('2030-01-01T00:00:00Z') && type(self.ratio) == double && "
                                      "self.__for__ > duration('1m')"}))
    good = {"spec": {"x-y": 1, "namespace": "n", "at": "2026-01-01T00:00:00Z", "ratio": 1, "for": "90s"}}
    assert errors(good, schema) == []
    late = copy.deepcopy(good)
    late["spec"]["at"] = "2031-01-01T00:00:00Z"
    assert len(errors(late, schema)) == 1


@pytest.mark.unit
def test_transition_rules_compare_with_the_correlated_old_value() -> None:
    immutable = {"rule": "self == oldSelf", "message": "is immutable"}
    items = {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
             "items": obj_schema({"name": STRING, "size": INT}, {"rule": "self.size >= oldSelf.size",
                                                                 "message": "may only grow"})}
    schema = root(obj_schema({"class": {**STRING, "x-kubernetes-validations": [immutable]}, "pools": items}))
    old = {"spec": {"class": "a", "pools": [{"name": "x", "size": 4}, {"name": "y", "size": 2}]}}
    assert errors(old, schema) == []  # a create: no old value, no transition rule
    new = {"spec": {"class": "b", "pools": [{"name": "y", "size": 1}, {"name": "x", "size": 5},
                                            {"name": "z", "size": 0}]}}
    assert errors(new, schema, old) == ['spec.class: Invalid value: "string": is immutable',
                                        'spec.pools[0]: Invalid value: "object": may only grow']


@pytest.mark.unit
def test_rules_are_not_run_after_a_blocking_schema_error() -> None:
    schema = root(obj_schema({"size": INT, "mode": {"type": "string", "enum": ["A", "B"]}},
                             {"rule": "self.size > 0"}, required=["size"]))
    assert errors({"spec": {"mode": "A"}}, schema) == ["spec.size: Required value", NOT_CHECKED]
    assert errors({"spec": {"size": 0, "mode": "C"}}, schema)[-1] == NOT_CHECKED
    assert errors({"spec": {"size": 0, "mode": "A"}}, schema) == [
        'spec: Invalid value: "object": failed rule: self.size > 0']


@pytest.mark.unit
def test_defaults_are_filled_in_below_defaulted_objects() -> None:
    schema = root(obj_schema({
        "strategy": {"type": "string", "default": "FIFO"},
        "limits": {"type": "object", "default": {}, "properties": {"weight": {"type": "integer", "default": 1},
                                                                   "max": INT}},
        "given": {"type": "string", "default": "d"},
        "tiers": {"type": "array", "items": obj_schema({"name": STRING, "share": {"type": "integer", "default": 5}})},
    }, default={}))
    obj: Obj = {"spec": {"given": "mine", "tiers": [{"name": "a"}, {"name": "b", "share": 1}]}}
    default(obj, schema)
    assert obj == {"spec": {"strategy": "FIFO", "limits": {"weight": 1}, "given": "mine",
                            "tiers": [{"name": "a", "share": 5}, {"name": "b", "share": 1}]}}
    empty: Obj = {}
    default(empty, schema)
    assert empty == {"spec": {"strategy": "FIFO", "limits": {"weight": 1}, "given": "d"}}


@pytest.mark.unit
def test_int_or_string_values_get_the_other_keywords_and_maps_their_size() -> None:
    quantity = {"x-kubernetes-int-or-string": True, "pattern": "^[0-9]+$", "minimum": 0}
    schema = root(obj_schema({"q": {"type": "object", "additionalProperties": quantity, "maxProperties": 2}}))
    assert errors({"spec": {"q": {"a": "1", "b": 2}}}, schema) == []
    assert errors({"spec": {"q": {"a": "-1", "b": -2, "c": 1}}}, schema) == [
        "spec.q: Too many: 3: must have at most 2 items",
        "spec.q.a: Invalid value: \"-1\": spec.q.a in body should match '^[0-9]+$'",
        "spec.q.b: Invalid value: -2: spec.q.b in body should be greater than or equal to 0"]


def crd(group: str, spec_schema: Obj) -> Obj:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{group}"},
            "spec": {"group": group, "scope": "Cluster",
                     "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": root(spec_schema)}}]}}


@pytest.mark.unit
def test_a_crd_whose_rules_do_not_compile_is_refused() -> None:
    where = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations"
    bad = crd("example.com", obj_schema({"a": INT}, {"rule": "self.a >"}, {"rule": "size(x) > 0"},
                                        {"rule": "true", "reason": "Nope"}, {"rule": "true", "fieldPath": ".b"},
                                        {"rule": "true", "messageExpression": "'a' +"}, {"rule": " "}))
    found = validate_crd(bad)
    assert [e.split(": Invalid value")[0].split(": Unsupported")[0].split(": Required")[0] for e in found] == [
        f"{where}[0].rule", f"{where}[1].rule", f"{where}[2].reason", f"{where}[3].fieldPath",
        f"{where}[4].messageExpression", f"{where}[5].rule"]
    assert found[1] == (f'{where}[1].rule: Invalid value: apiextensions.ValidationRule{{Rule:"size(x) > 0", '
                        'Message:"", MessageExpression:"", Reason:(*apiextensions.FieldValueErrorReason)(nil), '
                        'FieldPath:"", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>: '
                        "undeclared reference to 'x' (in container '')")
    assert found[3] == (f'{where}[3].fieldPath: Invalid value: ".b": fieldPath must be a valid path: does not refer '
                        "to a valid field")
    assert validate_crd(crd("example.com", obj_schema({"a": INT}, {"rule": "self.a > 0", "fieldPath": ".a"}))) == []


# --- end to end ---------------------------------------------------------------------------------------------------

GROUP = "rules.example.com"
SPEC = obj_schema(
    {"cohort": STRING, "limits": QUANTITIES, "mode": {"type": "string", "default": "Fair"},
     "class": {**STRING, "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "class is immutable"}]}},
    {"rule": "!has(self.limits) || has(self.cohort)", "message": "limits require a cohort"},
    {"rule": "!has(self.limits) || self.limits.all(k, k.matches('^[a-z]+$'))",
     "messageExpression": "'not names: ' + self.limits.filter(k, !k.matches('^[a-z]+$')).join(', ')"})


@pytest.fixture(scope="module")
def custom() -> Iterator[client.CustomObjectsApi]:
    with LocalCluster() as local:
        api_client = config.new_client_from_config(local.kubeconfig)
        extensions = client.ApiextensionsV1Api(api_client)
        extensions.create_custom_resource_definition(crd(GROUP, SPEC))
        wait_for(lambda: any(c.type == "Established" and c.status == "True" for c in
                             extensions.read_custom_resource_definition(f"widgets.{GROUP}").status.conditions or []),
                 what="the CRD established")
        yield client.CustomObjectsApi(api_client)
        api_client.close()


def refusal(call: Any) -> str:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 422, caught.value.body
    return str(json.loads(caught.value.body)["message"])


@pytest.mark.e2e
def test_rules_refuse_writes_through_the_api(custom: client.CustomObjectsApi) -> None:
    name = f"w-{uuid.uuid4().hex[:6]}"

    def widget(**spec: Any) -> Obj:
        return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}

    assert refusal(lambda: custom.create_cluster_custom_object(GROUP, "v1", "widgets", widget(limits={"cpu": 1}))) == (
        f'Widget.{GROUP} "{name}" is invalid: spec: Invalid value: "object": limits require a cohort')
    assert refusal(lambda: custom.create_cluster_custom_object(
        GROUP, "v1", "widgets", widget(cohort="c", limits={"cpu": 1, "GPU": 1, "x.y/z": 2}))) == (
        f'Widget.{GROUP} "{name}" is invalid: spec: Invalid value: "object": not names: GPU, x.y/z')
    created = custom.create_cluster_custom_object(GROUP, "v1", "widgets", widget(cohort="c", limits={"cpu": 1},
                                                                                 **{"class": "a"}))
    assert created["spec"]["mode"] == "Fair"  # the schema's default, stored
    changed = copy.deepcopy(created)
    changed["spec"]["class"] = "b"
    assert refusal(lambda: custom.replace_cluster_custom_object(GROUP, "v1", "widgets", name, changed)) == (
        f'Widget.{GROUP} "{name}" is invalid: spec.class: Invalid value: "string": class is immutable')
    changed["spec"]["class"] = "a"
    changed["spec"]["limits"] = {"cpu": 2}
    assert custom.replace_cluster_custom_object(GROUP, "v1", "widgets", name, changed)["spec"]["limits"] == {"cpu": 2}
