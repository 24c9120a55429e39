"""``kubenexus explain``: offline, what the webhook would do to a pod given its owner objects.

It builds the AdmissionReview request the apiserver would send and runs it through
``admit_pod``, the same code path as ``/mutate``, against the given objects only.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from gang.config import ConfigError, load_config
from gang.objects import MemorySource
from webhook.review import BadRequest, admit_pod


class InputError(ValueError):
    """A file could not be read or does not hold what it should; the message says which."""


def _documents(path: str) -> list[Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            docs = [d for d in yaml.safe_load_all(handle) if d is not None]
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path} is not valid YAML: {exc}") from None
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
            raise InputError(f"{path}: every document must be a Kubernetes object with apiVersion and kind")
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
    try:
        pods = _documents(args.pod)
        if len(pods) != 1 or pods[0].get("kind") != "Pod":
            raise InputError(f"{args.pod}: expected exactly one Pod, found {len(pods)} object(s)")
        objects = _documents(args.objects) if args.objects else []
        result = explain(pods[0], objects, args.namespace, args.config)
    except (InputError, ConfigError, BadRequest) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        _print_text(result)
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("explain", help="show offline what the webhook would do to a pod")
    parser.add_argument("--pod", required=True, help="YAML file with the pod as the operator creates it")
    parser.add_argument("--objects", help="YAML file (multi-document) with its owner objects and namespace")
    parser.add_argument("--namespace", help="the request's namespace (default: the pod's, else 'default')")
    parser.add_argument("--config", help="webhook configuration file")
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)
