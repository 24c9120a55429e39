"""What the apiserver refuses about a pod it is asked to create, judged by the emulator's port of its rules.

Admission runs before validation in a real cluster: a patch that leaves a pod the apiserver then refuses breaks
the operator that created it. Tests check the product's output here, against ``cluster.validation`` (ported from
upstream), never against rules of their own.
"""

from __future__ import annotations

import copy
from typing import Any

from cluster.defaults import apply_defaults
from cluster.validation.decode import decode_errors
from cluster.validation.pod import validate_pod_create


def create_errors(pod: Any, namespace: str) -> list[str]:
    """Every reason ``POST /api/v1/namespaces/{namespace}/pods`` would fail for ``pod``; empty when it is stored.

    The apiserver's order: the body must decode (400), its namespace must match the URL's (400), then the pod as
    it would be stored — namespace from the URL, defaults applied — must validate (422).
    """
    if not isinstance(pod, dict):
        return ["the body of the request is not a JSON object"]
    undecodable = decode_errors(pod)
    if undecodable:
        return undecodable
    stored = copy.deepcopy(pod)
    meta = stored.setdefault("metadata", {})
    if meta.get("namespace") and meta["namespace"] != namespace:
        return ["the namespace of the provided object does not match the namespace sent on the request"]
    meta["namespace"] = namespace
    apply_defaults("Pod", "", stored)
    return validate_pod_create(stored)


def introduced_errors(before: Any, after: Any, namespace: str) -> list[str]:
    """The errors ``after`` (``before`` as admission changed it) has that ``before`` had not: what admission broke.

    Test pods often leave out what the apiserver needs but admission never touches (an image, a name); those
    errors are the test's, the rest are the product's.
    """
    known = set(create_errors(before, namespace))
    return [error for error in create_errors(after, namespace) if error not in known]
