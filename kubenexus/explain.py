"""``kubenexus explain``: offline, what the webhook would do to a pod given its owner objects.

It builds the AdmissionReview request the apiserver would send and runs it through
``admit_pod``, the same code path as ``/mutate``, against the given objects only. Every object the decision
looked for and did not find among them is named (on a live cluster the Namespace, at least, exists: its absence
here must not pass for a verdict).

A pod read from a cluster after admission (``kubectl get pod -o yaml``) carries admission's and the gate
controller's state: explain says what that state is (its gang, gated or released, its node), and decides again for
the pod as its creator sent it, without that state.
"""

from __future__ import annotations

import argparse
import copy
import json
from typing import Any

import yaml

from gang import keys
from gang.config import Config, ConfigError, load_config
from gang.kinds import Kind
from gang.objects import Deadline, MemorySource, Obj
from kubenexus.errors import CommandError, opened
from kubenexus.output import add_output, dump
from webhook.review import BadRequest, PodAdmission, admit_pod


def _documents(path: str) -> list[Any]:
    with opened(path) as handle:
        try:
            docs = [d for d in yaml.safe_load_all(handle) if d is not None]
        except yaml.YAMLError as exc:
            raise CommandError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    objects: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and doc["kind"].endswith("List"):
            items = doc.get("items") or []
            objects.extend(items if isinstance(items, list) else [items])
        else:
            objects.append(doc)
    for obj in objects:
        if (not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion")
                or not isinstance(obj.get("metadata") or {}, dict)):
            raise CommandError(f"{path}: every document must be a Kubernetes object with apiVersion and kind")
    return objects


class Recorded(MemorySource):
    """The given objects, remembering each one the decision asked for and did not find."""

    def __init__(self, objects: list[Obj]) -> None:
        super().__init__(objects)
        self.missing: list[str] = []

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        found = super().get(kind, api_version, namespace, name, uid, deadline)
        if found is None:
            what = f"{kind.kind} {namespace}/{name}" if namespace else f"{kind.kind} {name}"
            if what not in self.missing:
                self.missing.append(what)
        return found


def _meta(pod: Obj, field: str) -> dict[str, Any]:
    value = (pod.get("metadata") or {}).get(field)
    return value if isinstance(value, dict) else {}


def _gated(pod: Obj) -> bool:
    return any(isinstance(g, dict) and g.get("name") == keys.GANG_GATE
               for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def admitted(pod: Obj, objects: list[Obj]) -> dict[str, Any] | None:
    """What admission and the gate controller left on ``pod`` (None for a pod as its creator sends it): its gang and
    size, whether it is gated, released or bound, and how many of the gang's member pods ``objects`` hold."""
    labels, annotations = _meta(pod, "labels"), _meta(pod, "annotations")
    traces = (keys.OWNER_ANNOTATION, keys.UNRESOLVED_ANNOTATION, keys.PLANNED_NODE_ANNOTATION)
    if not _gated(pod) and not any(key in annotations for key in traces):
        return None
    gang, namespace = labels.get(keys.POD_GROUP_LABEL), (pod.get("metadata") or {}).get("namespace")
    node, planned = (pod.get("spec") or {}).get("nodeName"), annotations.get(keys.PLANNED_NODE_ANNOTATION)
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if keys.UNRESOLVED_ANNOTATION in annotations and _gated(pod):
        state = (f"gated, unresolved: its owner could not be read at admission "
                 f"({annotations[keys.UNRESOLVED_ANNOTATION]}); the gate controller decides it again")
    elif _gated(pod):
        state = "gated: waiting for the gate controller to release the whole gang"
    elif planned:
        state = f"released onto node {planned} by the gate controller, " + (
            f"bound to {node} ({phase})" if node else "not bound yet")
    else:
        state = "not gated and no planned node: not released by the gate controller" + (
            f"; bound to {node} ({phase})" if node else "")
    members = [o for o in [pod, *objects] if o.get("kind") == "Pod" and gang
               and (o.get("metadata") or {}).get("namespace") == namespace
               and _meta(o, "labels").get(keys.POD_GROUP_LABEL) == gang]
    names = {(o.get("metadata") or {}).get("name") for o in members}
    return {"gang": gang, "size": labels.get(keys.POD_GROUP_MIN_LABEL), "owner": annotations.get(
        keys.OWNER_ANNOTATION), "state": state, "gated": _gated(pod), "planned_node": planned, "node": node,
        "members_given": len(names)}


def as_created(pod: Obj, gang_labels: bool) -> Obj:
    """``pod`` without the state admission and the gate controller keep on it (their annotations, the gate) nor what
    the cluster added since (its node, its status): what its creator sent, as far as a decision reads it. The gang's
    labels (and their coscheduling annotations) are kept only with ``gang_labels``: admission writes them, but a
    creator may have set them too."""
    created = copy.deepcopy(pod)
    annotations, labels = _meta(created, "annotations"), _meta(created, "labels")
    for key in (*keys.PRODUCT_STATE, *(() if gang_labels else keys.WRITTEN_ANNOTATIONS)):
        annotations.pop(key, None)
    for key in () if gang_labels else keys.WRITTEN_LABELS:
        labels.pop(key, None)
    for field, values in (("annotations", annotations), ("labels", labels)):
        if not values:
            created.get("metadata", {}).pop(field, None)
    spec: Obj = created["spec"] if isinstance(created.get("spec"), dict) else {}
    spec.pop("nodeName", None)
    gates = [g for g in spec.get("schedulingGates") or [] if not (isinstance(g, dict)
                                                                   and g.get("name") == keys.GANG_GATE)]
    spec["schedulingGates"] = gates
    if not gates:
        del spec["schedulingGates"]
    created.pop("status", None)
    return created


def _same_gang(pod: Obj, admitted_pod: Obj) -> bool:
    return all(_meta(pod, "labels").get(key) == _meta(admitted_pod, "labels").get(key) for key in keys.WRITTEN_LABELS)


def admit(pod: Obj, namespace: str, objects: list[Obj], config: Config) -> tuple[PodAdmission, list[str]]:
    """``/mutate``'s answer for a CREATE of ``pod`` in ``namespace``, and the objects it looked for and did not find."""
    request = {
        "uid": "kubenexus-explain",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": namespace,
        "object": pod,
    }
    source = Recorded(objects)
    admission = admit_pod(request, source, config)
    assert admission is not None  # a pod CREATE always gets an answer
    return admission, source.missing


def explain(pod: dict[str, Any], objects: list[dict[str, Any]], namespace: str | None,
            config_path: str | None = None) -> dict[str, Any]:
    """The webhook's answer for ``pod`` as one JSON-able object; for a pod already admitted, what it carries and
    the answer for the pod as its creator sent it: without the gang's labels if admission gives it the same ones
    again (they were admission's), else with them (its creator's)."""
    config = load_config(config_path)
    ns = namespace or (pod.get("metadata") or {}).get("namespace") or "default"
    state = admitted(pod, objects)
    admission, missing = admit(pod if state is None else as_created(pod, False), ns, objects, config)
    if state is not None and not _same_gang(pod, admission.pod):
        admission, missing = admit(as_created(pod, True), ns, objects, config)
    return {
        "admitted": state,
        "missing": missing,
        "allowed": admission.review["response"]["allowed"],
        "denial": admission.denial,
        "action": admission.decision.action.value,
        "patch": admission.patch,
        "pod": admission.pod,
        "warnings": list(admission.decision.warnings),
        "reasons": list(admission.decision.reasons),
    }


def _print_text(result: dict[str, Any]) -> None:
    state = result["admitted"]
    if state is not None:
        gang = f"gang {state['gang']} of {state['size']}" if state["gang"] else "no gang label"
        given = f", {state['members_given']} of its member pods given" if state["gang"] else ""
        owner = f", owner {state['owner']}" if state["owner"] else ""
        print(f"admitted: {gang}{given}{owner}; {state['state']}")
        print("admission now, for the pod as its creator sent it (without that state):")
    if result["missing"]:
        print(f"missing from the objects given: {', '.join(result['missing'])}: decided as if they did not exist; "
              "add them (kubectl get ... -o yaml) if they do")
    print(f"decision: {result['action']} (allowed: {str(result['allowed']).lower()})")
    if result["denial"]:
        print(f"denied: {result['denial']}")
    print("reasons:")
    for reason in result["reasons"]:
        print(f"  - {reason}")
    if result["warnings"]:
        print("warnings:")
        for warning in result["warnings"]:
            print(f"  - {warning}")
    print("patch:" + (" (none)" if not result["patch"] else ""))
    for op in result["patch"]:
        print(f"  {json.dumps(op)}")
    if result["denial"]:
        print("pod after admission: (none: the apiserver refuses the create)")
        return
    print("pod after admission:")
    print(yaml.safe_dump(result["pod"], sort_keys=False).rstrip())


def run(args: argparse.Namespace) -> int:
    if args.pod == "-" and args.objects == "-":
        raise CommandError("only one of --pod and --objects can be read from stdin (-)")
    pods = _documents(args.pod)
    if len(pods) != 1 or pods[0].get("kind") != "Pod":
        raise CommandError(f"{args.pod}: expected exactly one Pod, found {len(pods)} object(s)")
    objects = _documents(args.objects) if args.objects else []
    try:
        result = explain(pods[0], objects, args.namespace, args.config)
    except (ConfigError, BadRequest) as exc:
        raise CommandError(str(exc)) from None
    if args.output == "text":
        _print_text(result)
    else:
        print(dump(result, args.output))
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("explain", help="show offline what the webhook would do to a pod",
                                   description="What the webhook would do to a pod, given its owner objects: the "
                                   "decision, the reasons, the patch and the pod after admission.")
    parser.add_argument("--pod", required=True, metavar="FILE",
                        help="YAML file (- for stdin) with the pod as the operator creates it")
    parser.add_argument("--objects", metavar="FILE",
                        help="YAML file (multi-document, - for stdin) with its owner objects and namespace")
    parser.add_argument("--namespace", help="the request's namespace (default: the pod's, else 'default')")
    parser.add_argument("--config", help="webhook configuration file")
    add_output(parser)
    parser.set_defaults(func=run)
