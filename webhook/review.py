"""AdmissionReview v1: parsing requests, building responses, and the pod mutation entry point.

``admit_pod`` is the single code path behind ``/mutate`` and ``kubenexus explain``.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass

from gang.config import Config
from gang.decide import Action, Decision, decide
from gang.mutate import desired_pod, forged_state, json_patch
from gang.objects import Deadline, Obj, ObjectSource
from gang.structure import OBJECT, POD, REQUEST, structure_error
from gang.validate import Refusal

API_VERSION = "admission.k8s.io/v1"
log = logging.getLogger("kubenexus.webhook")



class BadRequest(ValueError):
    """The body is not an AdmissionReview we can answer; the message says why (HTTP 400)."""


def parse_review(body: bytes) -> Obj:
    """The ``request`` of an AdmissionReview v1 body, checked for the fields we rely on, the request's own
    structure and its objects' included (``gang/structure.py``)."""
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    except RecursionError:  # json's C scanner gives up on very deep nesting
        raise BadRequest("body is nested too deeply") from None
    if not isinstance(review, dict):
        raise BadRequest("body is not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadRequest(f"expected apiVersion {API_VERSION} and kind AdmissionReview, got "
                         f"{review.get('apiVersion')!r} {review.get('kind')!r}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadRequest("request is missing or not an object")
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        raise BadRequest("request.uid is missing or not a string")
    for name in ("kind", "resource"):
        if not isinstance(request.get(name), dict):
            raise BadRequest(f"request.{name} is missing or not an object")
    if not isinstance(request.get("operation"), str):
        raise BadRequest("request.operation is missing or not a string")
    problem = structure_error(request, REQUEST, "request")
    if problem:
        raise BadRequest(problem)
    shape = POD if is_pod(request) else OBJECT
    for name in ("object", "oldObject"):
        problem = structure_error(request.get(name), shape, f"request.{name}")
        if problem:
            raise BadRequest(problem)
    return request


def review_response(uid: str, allowed: bool = True, patch: list[Obj] | None = None,
                    warnings: tuple[str, ...] | list[str] = (), message: str = "", code: int = 403) -> Obj:
    response: Obj = {"uid": uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    if warnings:
        response["warnings"] = list(warnings)
    if not allowed:
        response["status"] = {"code": code, "message": message, "reason": "Forbidden" if code == 403 else "Invalid"}
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def is_pod(request: Obj) -> bool:
    kind = request["kind"]
    return (kind.get("group", "") == "" and kind.get("kind") == "Pod" and not request.get("subResource"))


@dataclass(frozen=True)
class PodAdmission:
    decision: Decision
    pod: Obj  # the pod after the patch (as sent, when denied)
    patch: list[Obj]
    review: Obj  # the AdmissionReview response
    denial: str = ""  # why the CREATE is refused (product state the pod may not carry), else empty


def admit_pod(request: Obj, source: ObjectSource, config: Config) -> PodAdmission | None:
    """Decide and mutate a pod CREATE, or refuse it for forged product state; None when the request is not a pod
    CREATE (nothing to do)."""
    if not is_pod(request) or request["operation"] != "CREATE":
        return None
    pod = request.get("object")
    if not isinstance(pod, dict):
        raise BadRequest("request.object is missing for a pod CREATE")
    namespace = request.get("namespace") or (pod.get("metadata") or {}).get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise BadRequest("request.namespace is missing for a pod CREATE")
    denial, code = None, int(Refusal.FORBIDDEN)
    try:
        decision = decide(pod, namespace, source, config, Deadline(config.admission_deadline_seconds))
        denial = forged_state(pod, decision)
        if denial is None and decision.denial is not None:  # its min-available contradicts its PodGroup's
            denial, code = decision.denial.message, int(decision.denial.code)
    except Exception:  # a bug must not block pods: admit unchanged, loudly
        log.exception("deciding the gang failed", extra={"uid": request["uid"], "namespace": namespace})
        decision = Decision(Action.SKIP, ("internal error while deciding the gang",),
                            ("kubenexus: internal error while deciding the gang; pod admitted unchanged",))
    if denial:
        return PodAdmission(decision, pod, [], review_response(request["uid"], allowed=False, message=denial,
                                                               warnings=decision.warnings, code=code), denial)
    desired = desired_pod(pod, decision, config)
    patch = json_patch(pod, desired)
    return PodAdmission(decision, desired, patch,
                        review_response(request["uid"], patch=patch, warnings=decision.warnings))
