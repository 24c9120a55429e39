"""The pod checks the apiserver applies after admission, so tests see what a cluster would reject.

Test equipment: label keys and values, scheduling gate names (qualified names), annotation
size, schedulerName, and "no gates on a pod created with spec.nodeName".
"""

from __future__ import annotations

import re
from typing import Any

_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_NAME})?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_ANNOTATIONS_BYTES = 256 * 1024


def qualified_name_errors(key: str, what: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    errors = []
    if not _QUALIFIED.match(key) or len(name) > 63 or len(prefix) > 253:
        errors.append(f"{what} {key!r} is not a valid qualified name")
    return errors


def pod_errors(pod: dict[str, Any]) -> list[str]:
    """Every reason the apiserver would refuse to create ``pod`` (as far as admission can affect)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    errors: list[str] = []
    for key, value in (meta.get("labels") or {}).items():
        errors += qualified_name_errors(key, "label key")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(f"label value {value!r} of {key} is invalid")
    annotations = meta.get("annotations") or {}
    for key, value in annotations.items():
        errors += qualified_name_errors(key.lower(), "annotation key")
        if not isinstance(value, str):
            errors.append(f"annotation {key} is not a string")
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > MAX_ANNOTATIONS_BYTES:
        errors.append("annotations exceed 256 KiB")
    gates = spec.get("schedulingGates") or []
    names = [g.get("name") for g in gates]
    for name in names:
        errors += qualified_name_errors(str(name), "scheduling gate")
    if len(set(names)) != len(names):
        errors.append("duplicate scheduling gates")
    if gates and spec.get("nodeName"):
        errors.append("spec.schedulingGates cannot be set when spec.nodeName is")
    scheduler = spec.get("schedulerName")
    if scheduler is not None and (not _DNS_SUBDOMAIN.match(scheduler) or len(scheduler) > 253):
        errors.append(f"schedulerName {scheduler!r} is not a DNS subdomain")
    return errors
