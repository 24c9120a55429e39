"""events.k8s.io/v1 Events as the tests read them: listed as plain dicts, and checked against the API's own rules.

``problems`` is the apiserver's validation of an Event created through events.k8s.io/v1
(pkg/apis/core/validation/events.go, ``ValidateEventCreate`` and ``legacyValidateEvent``), applied to what is stored:
so a test fails on an Event a real apiserver would have refused, whatever the local cluster accepts.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes import client

Obj = dict[str, Any]

NOTE_LIMIT = 1024
_QUALIFIED = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")


def list_events(api_client: client.ApiClient, ns: str) -> list[Obj]:
    """The namespace's events.k8s.io/v1 Events, as stored."""
    data = client.EventsV1Api(api_client).list_namespaced_event(ns, _preload_content=False).data
    return list(json.loads(data)["items"])


def about(events: list[Obj], kind: str, name: str, reason: str = "") -> list[Obj]:
    """The Events regarding the object ``kind``/``name`` (with ``reason``, when given), oldest first."""
    return sorted((e for e in events if (e.get("regarding") or {}).get("kind") == kind
                   and e["regarding"].get("name") == name and (not reason or e.get("reason") == reason)),
                  key=lambda e: e.get("eventTime") or "")


def count(event: Obj) -> int:
    """How often the Event happened: its series' count, else once."""
    return int((event.get("series") or {}).get("count") or 1)


def _qualified_name(value: str) -> bool:
    prefix, _, name = value.rpartition("/")
    return (not prefix or (len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(prefix)))) and \
        0 < len(name) <= 63 and bool(_QUALIFIED.fullmatch(name))


def problems(event: Obj) -> list[str]:
    """What the apiserver would refuse in this Event, created through events.k8s.io/v1 (empty: nothing)."""
    found = []
    meta = event.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not (len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name)):
        found.append(f"metadata.name {name!r} is not a DNS subdomain")
    if not _MICRO_TIME.fullmatch(str(event.get("eventTime") or "")):
        found.append(f"eventTime {event.get('eventTime')!r}: required, a MicroTime")
    if event.get("type") not in ("Normal", "Warning"):
        found.append(f"type {event.get('type')!r}")
    for deprecated in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount", "deprecatedSource"):
        if event.get(deprecated):
            found.append(f"{deprecated} must be unset")
    controller = str(event.get("reportingController") or "")
    if not _qualified_name(controller):
        found.append(f"reportingController {controller!r}: required, a qualified name")
    for field, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
        value = str(event.get(field) or "")
        if not 0 < len(value) <= limit:
            found.append(f"{field} {value!r}: required, at most {limit} characters")
    if len(str(event.get("note") or "").encode()) > NOTE_LIMIT:
        found.append(f"note longer than {NOTE_LIMIT} bytes")
    regarding = event.get("regarding") or {}
    if not regarding.get("namespace") and meta.get("namespace") not in ("default", "kube-system"):
        found.append("a cluster-scoped object's Event belongs in default or kube-system")
    series = event.get("series")
    if series is not None and (int(series.get("count") or 0) < 2 or not series.get("lastObservedTime")):
        found.append(f"series {series}: count at least 2, lastObservedTime required")
    return found
