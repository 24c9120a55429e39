"""The benchmarks' side of admission: the AdmissionReview the apiserver POSTs for a pod CREATE, and one admission.

The benchmarks drive ``kubenexus webhook`` from outside, as the apiserver does; the request carries what a real
one carries (an operator's service account creating the pod), so the webhook does the work it does in a cluster.
"""

from __future__ import annotations

import base64
import http.client
import json
import uuid
from typing import Any

import jsonpatch

OPERATOR = "system:serviceaccount:ops:spark-operator"
_POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
_PODS = {"group": "", "version": "v1", "resource": "pods"}


def review_body(pod: dict[str, Any], namespace: str) -> bytes:
    """The JSON body of ``POST /mutate`` for ``pod`` created in ``namespace``."""
    request = {"uid": str(uuid.uuid4()), "kind": _POD_KIND, "resource": _PODS, "requestKind": _POD_KIND,
               "requestResource": _PODS, "name": (pod.get("metadata") or {}).get("name", ""), "namespace": namespace,
               "operation": "CREATE", "userInfo": {"username": OPERATOR, "groups": ["system:authenticated"]},
               "object": pod, "oldObject": None, "dryRun": False,
               "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def admit(conn: http.client.HTTPSConnection, pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``pod`` as the apiserver would store it after ``/mutate`` on ``conn`` (kept alive); fails on a refusal."""
    conn.request("POST", "/mutate", body=review_body(pod, namespace), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    body = response.read()
    assert response.status == 200, (response.status, body[:300])
    answer = json.loads(body)["response"]
    assert answer["allowed"] is True, answer
    if "patch" not in answer:
        return pod
    return jsonpatch.apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
