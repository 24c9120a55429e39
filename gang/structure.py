"""The structure of an object given to admission (an AdmissionReview's ``object``/``oldObject``, ``explain``'s files),
checked once before any decision reads it.

The apiserver decodes every object into its Go type before a webhook sees it, so ``metadata`` is an object, its
``ownerReferences`` a list of objects, a pod's ``spec`` an object: the rules read them as such. A request that says
otherwise was not sent by an apiserver and is malformed (``webhook/review.py``: HTTP 400 naming the field), never a
case for the rules. Only the structure the rules walk is checked here (a field they never read is the apiserver's
to judge); a leaf of the wrong type (a label value that is a number) is the rules' to judge, and they say what is
wrong with it. ``null`` is an absent field, as Go's decoder reads it.

The request around them is held to the same standard (``REQUEST``): its fields are the apiserver's
AdmissionRequest, each of one Go type, so a ``userInfo`` that is a string or a ``dryRun`` of "yes" is malformed too,
not something for the rules to read as an empty user or a dry run.
"""

from __future__ import annotations

from typing import Any, TypeAlias

#: An object (with the structure of its fields), a list of one structure, or a leaf's type.
Shape: TypeAlias = dict[str, "Shape"] | list["Shape"] | type

_META: Shape = {"labels": dict, "annotations": dict, "ownerReferences": [dict]}
OBJECT: Shape = {"metadata": _META, "spec": dict}
POD: Shape = {"metadata": _META, "spec": {"schedulingGates": [dict]}}

_KIND: Shape = {"group": str, "version": str, "kind": str}
_RESOURCE: Shape = {"group": str, "version": str, "resource": str}
#: An AdmissionRequest (admission.k8s.io/v1) beside its objects: every field the webhook reads, and the few others
#: of the same plain types, so that the request is judged whole.
REQUEST: Shape = {"uid": str, "kind": _KIND, "resource": _RESOURCE, "subResource": str, "requestKind": _KIND,
                  "requestResource": _RESOURCE, "requestSubResource": str, "name": str, "namespace": str,
                  "operation": str, "userInfo": {"username": str, "uid": str, "groups": [str], "extra": dict},
                  "dryRun": bool, "options": dict}

_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


def _named(value: Any) -> str:
    return _NAMES.get(type(value), type(value).__name__)


def structure_error(value: Any, shape: Shape, at: str = "") -> str | None:
    """Where ``value`` departs from ``shape`` and how (``metadata.ownerReferences: expected a list, got a number``),
    or None; ``at`` is the path of ``value`` itself."""
    if value is None:
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{at}: expected a list, got {_named(value)}"
        return next((e for i, item in enumerate(value) if (e := structure_error(item, shape[0], f"{at}[{i}]"))), None)
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{at}: expected an object, got {_named(value)}"
        return next((e for key, inner in shape.items()
                     if (e := structure_error(value.get(key), inner, f"{at}.{key}" if at else key))), None)
    return None if isinstance(value, shape) else f"{at}: expected {_NAMES[shape]}, got {_named(value)}"
