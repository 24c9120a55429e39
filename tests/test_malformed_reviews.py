"""Malformed AdmissionReviews, garbled at any level of the object: answered by the malformed-input rules (HTTP 400
naming the field, or the rules' own answer), never through the internal-error path, which admits the object
unchanged with the warning "kubenexus: internal error ...".

In process, through the app's WSGI entry, against each operator scenario's owners: the pods and roots operators
create, with any value put anywhere in them (a few at a time). Deterministic, so CI sees the same examples.
"""

from __future__ import annotations

import copy
import functools
import io
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder, run_wsgi_app

from gang.config import Config
from gang.objects import MemorySource
from tests.support.contract import OPT_IN
from tests.support.fuzz import json_values
from tests.support.operator_scenarios import SCENARIOS, Scenario
from tests.support.webhook import pod_request
from webhook.app import create_app

pytestmark = pytest.mark.unit

NS = "team-a"
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {OPT_IN: "enabled"}}}
#: Fields an object may lack that the webhook reads: garbage is put there too.
ABSENT = {("metadata",): ("labels", "annotations", "ownerReferences", "name", "generateName", "namespace", "uid"),
          ("spec",): ("schedulingGates", "nodeName", "schedulerName", "containers", "initContainers")}


@functools.cache
def scenario(name: str) -> Scenario:
    return SCENARIOS[name](NS, {OPT_IN: "true"})


@functools.cache
def app(name: str) -> Any:
    return create_app(Config(), MemorySource([*scenario(name).owners, NAMESPACE]), lambda: (True, "")).wsgi_app


def children(value: Any, at: tuple[Any, ...]) -> list[Any]:
    """The keys or indexes under ``value`` at ``at`` (with the absent fields of ABSENT)."""
    if isinstance(value, dict):
        return [*value, *(k for k in ABSENT.get(at, ()) if k not in value)]
    return list(range(len(value))) if isinstance(value, list) else []


@st.composite
def place(draw: st.DrawFn, value: Any, at: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    """A place in ``value``: each level down is as likely as staying, so the top fields are garbled often."""
    keys = children(value, at)
    if not keys or (at and draw(st.booleans())):
        return at
    key = draw(st.sampled_from(keys))
    child = value.get(key) if isinstance(value, dict) else value[key]
    return draw(place(child, (*at, key)))


def put(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    parent: Any = changed
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return changed


@st.composite
def garbled(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with one to three of its places (at any depth) given any JSON value."""
    for _ in range(draw(st.integers(1, 3))):
        obj = put(obj, draw(place(obj)), draw(json_values))
    return obj


def review(name: str, endpoint: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST the AdmissionReview to the scenario's app: the HTTP status and the JSON body."""
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()
    environ = EnvironBuilder(path=endpoint, method="POST", data=body, content_type="application/json").get_environ()
    environ["wsgi.input"] = io.BytesIO(body)
    answer, status, _ = run_wsgi_app(app(name), environ)
    return int(status.split()[0]), json.loads(b"".join(answer))


def request_for(obj: Any, operation: str, old: Any = None) -> dict[str, Any]:
    """The request the apiserver sends for ``obj`` (any JSON value), of its kind when it names one."""
    request = pod_request({}, NS, operation=operation)
    request.update(object=obj, oldObject=old)
    api_version, kind = (obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else ("v1", "Pod")
    if isinstance(api_version, str) and isinstance(kind, str):
        group, _, version = api_version.rpartition("/")
        request["kind"] = {"group": group, "version": version, "kind": kind}
    return request


def never_internal(status: int, body: dict[str, Any]) -> None:
    assert status in (200, 400), (status, body)
    if status == 400:
        assert body["error"], body
        return
    warnings = body["response"].get("warnings") or []
    assert not [w for w in warnings if "internal error" in w], body


@settings(max_examples=300, derandomize=True, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(SCENARIOS)), what=st.sampled_from(["pod", "root"]),
       operation=st.sampled_from(["CREATE", "UPDATE"]))
def test_no_garbled_review_is_answered_as_an_internal_error(data: st.DataObject, name: str, what: str,
                                                            operation: str) -> None:
    base = scenario(name).pod if what == "pod" else scenario(name).root
    obj = data.draw(garbled(base), "object")
    old = data.draw(garbled(base), "oldObject") if operation == "UPDATE" else None
    for endpoint in ("/mutate", "/validate"):
        never_internal(*review(name, endpoint, request_for(obj, operation, old)))


@pytest.mark.parametrize(("place", "value", "error"), [
    (("metadata",), "pi-driver", "request.object.metadata: expected an object, got a string"),
    (("metadata",), ["pi-driver"], "request.object.metadata: expected an object, got a list"),
    (("metadata", "ownerReferences"), 1, "request.object.metadata.ownerReferences: expected a list, got a number"),
    (("metadata", "ownerReferences"), True, "request.object.metadata.ownerReferences: expected a list, got a boolean"),
    (("metadata", "ownerReferences", 0), "pi", "request.object.metadata.ownerReferences[0]: expected an object, got a "
     "string"),
    (("metadata", "labels"), [], "request.object.metadata.labels: expected an object, got a list"),
    (("spec",), "containers", "request.object.spec: expected an object, got a string"),
    (("spec",), [], "request.object.spec: expected an object, got a list"),
    (("spec", "schedulingGates"), 1, "request.object.spec.schedulingGates: expected a list, got a number"),
])
def test_the_shapes_met_by_fuzzing_are_a_400_naming_the_field(place: tuple[Any, ...], value: Any, error: str) -> None:
    """Each was answered "allowed, unchanged" through the internal-error path by /mutate, /validate or both."""
    pod = put(scenario("spark-driver").pod, place, value)
    for endpoint in ("/mutate", "/validate"):
        assert review("spark-driver", endpoint, request_for(pod, "CREATE")) == (400, {"error": error})
    update = request_for(scenario("spark-driver").pod, "UPDATE", old=pod)
    assert review("spark-driver", "/validate", update) == (400, {"error": error.replace("object", "oldObject", 1)})


#: The request's own fields and the fields inside them, as the apiserver sends them (AdmissionRequest): any may be
#: garbled, whatever its depth.
REQUEST_PLACES = [*((name,) for name in ("uid", "kind", "resource", "subResource", "requestKind", "requestResource",
                                          "requestSubResource", "name", "namespace", "operation", "userInfo",
                                          "dryRun", "options")),
                  *(("kind", name) for name in ("group", "version", "kind")),
                  *(("resource", name) for name in ("group", "version", "resource")),
                  *(("userInfo", name) for name in ("username", "uid", "groups", "extra")),
                  ("userInfo", "groups", 0)]


def reaches(request: dict[str, Any], path: tuple[Any, ...]) -> bool:
    """Whether the parent of ``path`` is still there to put a value in (an earlier garbling may have replaced it)."""
    parent: Any = request
    for step in path:
        fits = (isinstance(parent, dict) and isinstance(step, str)) or \
            (isinstance(parent, list) and isinstance(step, int) and step < len(parent))
        if not fits:
            return False
        parent = parent.get(step) if isinstance(parent, dict) else parent[step]
    return True


def requests_of(name: str) -> dict[str, dict[str, Any]]:
    """The requests the apiserver sends for the scenario: its pod created and updated, its root updated."""
    pod, root = scenario(name).pod, scenario(name).root
    return {"pod CREATE": request_for(pod, "CREATE"), "pod UPDATE": request_for(pod, "UPDATE", old=pod),
            "root CREATE": request_for(root, "CREATE"), "root UPDATE": request_for(root, "UPDATE", old=root)}


@settings(max_examples=300, derandomize=True, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(SCENARIOS)),
       which=st.sampled_from(["pod CREATE", "pod UPDATE", "root CREATE", "root UPDATE"]))
def test_no_review_with_a_garbled_request_is_answered_as_an_internal_error(data: st.DataObject, name: str,
                                                                           which: str) -> None:
    request = requests_of(name)[which]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from([p for p in REQUEST_PLACES if reaches(request, p)]))
        request = put(request, path, data.draw(json_values))
    for endpoint in ("/mutate", "/validate"):
        never_internal(*review(name, endpoint, request))


@pytest.mark.parametrize(("place", "value", "error"), [
    (("userInfo",), "alice", "request.userInfo: expected an object, got a string"),
    (("userInfo",), [1], "request.userInfo: expected an object, got a list"),
    (("userInfo",), 7, "request.userInfo: expected an object, got a number"),
    (("userInfo", "username"), ["alice"], "request.userInfo.username: expected a string, got a list"),
    (("userInfo", "username"), 1, "request.userInfo.username: expected a string, got a number"),
    (("userInfo", "groups"), "system:masters", "request.userInfo.groups: expected a list, got a string"),
    (("userInfo", "groups"), [1], "request.userInfo.groups[0]: expected a string, got a number"),
    (("userInfo", "groups", 0), {"name": "system:masters"}, "request.userInfo.groups[0]: expected a string, got an "
     "object"),
    (("kind", "kind"), ["Pod"], "request.kind.kind: expected a string, got a list"),
    (("kind", "group"), 1, "request.kind.group: expected a string, got a number"),
    (("subResource",), ["status"], "request.subResource: expected a string, got a list"),
    (("name",), 5, "request.name: expected a string, got a number"),
    (("namespace",), 5, "request.namespace: expected a string, got a number"),
    (("dryRun",), "yes", "request.dryRun: expected a boolean, got a string"),
    (("options",), [1], "request.options: expected an object, got a list"),
])
def test_a_garbled_request_is_a_400_naming_the_field(place: tuple[Any, ...], value: Any, error: str) -> None:
    """A malformed ``userInfo`` was answered "allowed, unchanged" through the internal-error path by /validate (pod
    CREATE and UPDATE, root UPDATE); the others were read as something else (a ``dryRun`` of "yes" as a dry run)."""
    for which, request in requests_of("spark-driver").items():
        for endpoint in ("/mutate", "/validate"):
            assert review("spark-driver", endpoint, put(request, place, value)) == (400, {"error": error}), \
                (which, endpoint)
