"""``kubenexus explain``: what the webhook would do to a pod, given its owner objects (offline) or read from a live
cluster (``explain pod NAME``).

It builds the AdmissionReview request the apiserver would send and runs it through
``admit_pod``, the same code path as ``/mutate``, against the given objects only, or against the cluster (read as
the webhook reads it). Every object the decision looked for and did not find among the given objects is named (on a
live cluster the Namespace, at least, exists: its absence here must not pass for a verdict).

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
from gang.objects import Deadline, MemorySource, Obj, ObjectSource
from gang.structure import OBJECT, POD, structure_error
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
        if not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion"):
            raise CommandError(f"{path}: every document must be a Kubernetes object with apiVersion and kind")
        problem = structure_error(obj, POD if obj["kind"] == "Pod" else OBJECT)
        if problem:
            raise CommandError(f"{path}: {_described(obj)}: {problem}")
    return objects


def _described(obj: Obj) -> str:
    """``Pod spark-pi-driver``: an object as a user would name it."""
    meta = obj.get("metadata")
    name = (meta.get("name") or meta.get("generateName")) if isinstance(meta, dict) else None
    return f"{obj.get('kind')} {name}" if name else f"a {obj.get('kind')} without a name"


class Recorded(MemorySource):
    """The given objects, remembering each one the decision asked for and did not find."""

    def __init__(self, objects: list[Obj]) -> None:
        super().__init__(objects)
        self.absent: dict[str, tuple[Kind, str]] = {}  # "Kind namespace/name" -> its kind and name, as asked

    @property
    def missing(self) -> list[str]:
        return list(self.absent)

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        found = super().get(kind, api_version, namespace, name, uid, deadline)
        if found is None:
            self.absent.setdefault(f"{kind.kind} {namespace}/{name}" if namespace else f"{kind.kind} {name}",
                                   (kind, name))
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


def admit(pod: Obj, namespace: str, source: ObjectSource, config: Config) -> PodAdmission:
    """``/mutate``'s answer for a CREATE of ``pod`` in ``namespace``, reading its owners from ``source``."""
    request = {
        "uid": "kubenexus-explain",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": namespace,
        "object": pod,
    }
    admission = admit_pod(request, source, config)
    assert admission is not None  # a pod CREATE always gets an answer
    return admission


def explain(pod: dict[str, Any], objects: list[dict[str, Any]], namespace: str | None,
            config_path: str | None = None, cluster: ObjectSource | None = None) -> dict[str, Any]:
    """The webhook's answer for ``pod`` as one JSON-able object; for a pod already admitted, what it carries and
    the answer for the pod as its creator sent it: without the gang's labels if admission gives it the same ones
    again (they were admission's), else with them (its creator's). Owners are read from ``cluster`` when given
    (``objects`` then only hold the gang's other members), else from ``objects``, naming those they lack."""
    config = load_config(config_path)
    ns = namespace or (pod.get("metadata") or {}).get("namespace") or "default"
    state = admitted(pod, objects)

    def decided(sent: Obj) -> tuple[PodAdmission, list[str]]:
        source = Recorded(objects) if cluster is None else cluster
        return admit(sent, ns, source, config), source.missing if isinstance(source, Recorded) else []

    admission, missing = decided(pod if state is None else as_created(pod, False))
    if state is not None and not _same_gang(pod, admission.pod):
        admission, missing = decided(as_created(pod, True))
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


def _print_text(result: dict[str, Any], live: bool) -> None:
    state = result["admitted"]
    if state is not None:
        gang = f"gang {state['gang']} of {state['size']}" if state["gang"] else "no gang label"
        given = (f", {state['members_given']} of its member pods {'in the cluster' if live else 'given'}"
                 if state["gang"] else "")
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


def _files(args: argparse.Namespace) -> tuple[Obj, list[Obj]]:
    """The pod and the objects of ``--pod FILE --objects FILE ...``."""
    if [args.pod, *args.objects].count("-") > 1:
        raise CommandError("only one of --pod and --objects can be read from stdin (-)")
    pods = _documents(args.pod)
    if len(pods) != 1 or pods[0].get("kind") != "Pod":
        found = ", ".join(_described(obj) for obj in pods[:3]) + (", ..." if len(pods) > 3 else "")
        owners = "; owner objects go in --objects FILE" if any(obj.get("kind") != "Pod" for obj in pods) else ""
        raise CommandError(f"{args.pod}: expected exactly one Pod, found "
                           + (f"{len(pods)} object(s): {found}{owners}" if pods else "no object"))
    return pods[0], [obj for path in args.objects for obj in _documents(path)]


def _from_cluster(args: argparse.Namespace) -> tuple[Obj, list[Obj], ObjectSource, str]:
    """``explain pod NAME``: the pod, its gang's member pods and the cluster to read its owners from (as the webhook
    reads them), and its namespace."""
    import urllib.parse

    from kube.source import ApiSource
    from kubenexus.live import TIMEOUT, connect, context_namespace, existing_namespace, get

    namespace = args.namespace or context_namespace(args.kubeconfig)
    api_client = connect(args.kubeconfig, pool_size=2)
    pods = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods"
    pod = get(api_client, f"{pods}/{urllib.parse.quote(args.name)}")
    if pod is None:
        existing_namespace(api_client, namespace)
        raise CommandError(f"pod {args.name} not found in namespace {namespace} (kubectl -n {namespace} get pods lists "
                           "them; -n NAMESPACE names another)")
    gang = _meta(pod, "labels").get(keys.POD_GROUP_LABEL)
    members: list[Obj] = []
    if isinstance(gang, str):
        selector = urllib.parse.urlencode({"labelSelector": f"{keys.POD_GROUP_LABEL}={gang}"})
        members = (get(api_client, f"{pods}?{selector}") or {}).get("items") or []
    return pod, members, ApiSource(api_client, TIMEOUT, retries=1), namespace


def run(args: argparse.Namespace) -> int:
    if args.what is not None and args.name is None:
        raise CommandError("which pod? kubenexus explain pod NAME [-n NAMESPACE]")
    if (args.what is None) == (args.pod is None):
        raise CommandError("give the pod once: --pod FILE (its owners with --objects FILE), or pod NAME to read it "
                           "and its owners from the cluster")
    if args.what is not None and args.objects:
        raise CommandError("--objects goes with --pod FILE: explain pod NAME reads the pod's owners from the cluster")
    cluster: ObjectSource | None = None
    if args.what is None:
        pod, objects = _files(args)
        namespace = args.namespace
    else:
        pod, objects, cluster, namespace = _from_cluster(args)
    try:
        result = explain(pod, objects, namespace, args.config, cluster)
    except (ConfigError, BadRequest) as exc:
        raise CommandError(str(exc)) from None
    if args.output == "text":
        _print_text(result, cluster is not None)
    else:
        print(dump(result, args.output))
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("explain", help="show what the webhook would do to a pod (files, or a live pod)",
                                   description="What the webhook would do to a pod: the decision, the reasons, the "
                                   "patch and the pod after admission. From files (--pod FILE, its owner objects and "
                                   "namespace with --objects FILE), or for a pod of a live cluster (pod NAME), whose "
                                   "owners and namespace are read from it as the webhook reads them.")
    parser.add_argument("what", nargs="?", choices=["pod"], metavar="pod",
                        help="explain a pod of the cluster your kubeconfig names, by NAME")
    parser.add_argument("name", nargs="?", metavar="NAME", help="the pod's name")
    parser.add_argument("--pod", metavar="FILE",
                        help="YAML file (- for stdin) with the pod as the operator creates it")
    parser.add_argument("--objects", metavar="FILE", action="append", default=[],
                        help="YAML file (multi-document, - for stdin) with its owner objects and namespace; "
                        "repeat it for more files")
    parser.add_argument("-n", "--namespace", help="the request's namespace (default: the pod's, else 'default'); "
                        "with pod NAME, the pod's (default: the kubeconfig context's, else default)")
    parser.add_argument("--kubeconfig", help="with pod NAME: kubeconfig (default: KUBECONFIG, in-cluster, "
                        "~/.kube/config)")
    parser.add_argument("--config", help="webhook configuration file")
    add_output(parser)
    parser.set_defaults(func=run)
