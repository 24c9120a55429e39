"""``kubenexus explain``: offline, what the webhook would do to a pod given its owner objects.

It builds the AdmissionReview request the apiserver would send and runs it through
``admit_pod``, the same code path as ``/mutate``, against the given objects only.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from gang.config import ConfigError, load_config
from gang.objects import MemorySource
from kubenexus.errors import CommandError, opened
from kubenexus.output import add_output, dump
from webhook.review import BadRequest, admit_pod


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


def explain(pod: dict[str, Any], objects: list[dict[str, Any]], namespace: str | None,
            config_path: str | None = None) -> dict[str, Any]:
    """The webhook's answer for ``pod`` as one JSON-able object."""
    config = load_config(config_path)
    ns = namespace or (pod.get("metadata") or {}).get("namespace") or "default"
    request = {
        "uid": "kubenexus-explain",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": ns,
        "object": pod,
    }
    admission = admit_pod(request, MemorySource(objects), config)
    assert admission is not None  # a pod CREATE always gets an answer
    return {
        "allowed": admission.review["response"]["allowed"],
        "denial": admission.denial,
        "action": admission.decision.action.value,
        "patch": admission.patch,
        "pod": admission.pod,
        "warnings": list(admission.decision.warnings),
        "reasons": list(admission.decision.reasons),
    }


def _print_text(result: dict[str, Any]) -> None:
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
