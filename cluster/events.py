"""Events: one kind of object, served as core/v1 ``Event`` and as ``events.k8s.io/v1`` ``Event``.

On a cluster both APIs are views of the same stored objects (the internal ``api.Event``): an Event created through
one is listed, watched, patched and deleted through the other. The emulator stores every Event once, in its core/v1
form, and converts at the API boundary as ``pkg/apis/events/v1/conversion.go`` does: ``regarding`` <->
``involvedObject``, ``note`` <-> ``message``, ``reportingController`` <-> ``reportingComponent`` (the core/v1 JSON
name of the same field), ``deprecatedSource``/``deprecatedFirstTimestamp``/``deprecatedLastTimestamp``/
``deprecatedCount`` <-> ``source``/``firstTimestamp``/``lastTimestamp``/``count``; ``series`` (count,
lastObservedTime), ``eventTime``, ``action``, ``reason``, ``related``, ``reportingInstance`` and ``type`` are the same
fields in both. (kubectl's EVENTS table shows a series' ``count`` and ``lastObservedTime`` as COUNT and LAST SEEN;
the stored ``count``/``lastTimestamp`` are other fields.) Fields neither version has are dropped, as decoding into
the typed struct drops them.

Validation is ``pkg/apis/core/validation/events.go``: every write passes ``legacyValidateEvent`` (an Event with an
``eventTime`` needs ``reportingController`` (a qualified name), ``reportingInstance`` (<= 128), ``action``
(<= 128), ``reason`` (<= 128) and a message of <= 1024 bytes; the namespaces must agree); a write through
events.k8s.io/v1 is also strict (``ValidateEventCreate``/``ValidateEventUpdate``): ``eventTime`` required,
``type`` Normal or Warning, the deprecated fields unset, ``series.count`` >= 2 with a ``lastObservedTime``, and on
update everything but the series (and metadata) immutable. Errors name the internal fields (``message``,
``involvedObject``), as the apiserver's do. Field selectors are ``ToSelectableFields`` (``source`` is the source
component, else the reporting controller) and, for events.k8s.io/v1, ``AddFieldLabelConversionsForEvent``.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

from cluster.selectors import FieldRequirement, FieldSelector
from cluster.store import ApiError, Obj
from cluster.validation.errors import invalid, required
from cluster.validation.names import byte_size, dns1123_subdomain, qualified_name

EVENTS_GROUP = "events.k8s.io"
CORE_API_VERSION, EVENTS_API_VERSION = "v1", "events.k8s.io/v1"
REPORTING_INSTANCE_LIMIT = ACTION_LIMIT = REASON_LIMIT = 128
NOTE_LIMIT = 1024

#: events.k8s.io/v1 name -> core/v1 name, for the fields that are renamed
_RENAMED = {"regarding": "involvedObject", "note": "message", "reportingController": "reportingComponent",
            "deprecatedSource": "source", "deprecatedFirstTimestamp": "firstTimestamp",
            "deprecatedLastTimestamp": "lastTimestamp", "deprecatedCount": "count"}
_SHARED = ("eventTime", "series", "action", "reason", "related", "reportingInstance", "type")
#: events.k8s.io/v1 field label -> the core/v1 field set's label (AddFieldLabelConversionsForEvent)
FIELD_LABELS = {"regarding.kind": "involvedObject.kind", "regarding.namespace": "involvedObject.namespace",
                "regarding.name": "involvedObject.name", "regarding.uid": "involvedObject.uid",
                "regarding.apiVersion": "involvedObject.apiVersion",
                "regarding.resourceVersion": "involvedObject.resourceVersion",
                "regarding.fieldPath": "involvedObject.fieldPath", "reportingController": "reportingComponent",
                "source": "source", "reason": "reason", "type": "type", "metadata.namespace": "metadata.namespace",
                "metadata.name": "metadata.name"}
CORE_FIELD_LABELS = ("metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
                     "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
                     "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
                     "source", "type")


def _object(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def is_events_v1(group: str, kind: str) -> bool:
    return (group, kind) == (EVENTS_GROUP, "Event")


def _base(obj: Obj) -> Obj:
    out: Obj = {}
    if "metadata" in obj:
        out["metadata"] = copy.deepcopy(obj["metadata"])
    return out


def to_core(event: Any) -> Any:
    """An events.k8s.io/v1 Event as the core/v1 Event it is stored as."""
    if not isinstance(event, dict):
        return event
    core = {"apiVersion": CORE_API_VERSION, "kind": "Event", **_base(event)}
    for new, old in _RENAMED.items():
        if new in event:
            core[old] = copy.deepcopy(event[new])
    for name in _SHARED:
        if name in event:
            core[name] = copy.deepcopy(event[name])
    # The core/v1 JSON of an Event written through the new API: what Go's encoder writes for unset fields.
    core.setdefault("involvedObject", {})
    core.setdefault("source", {})
    core.setdefault("firstTimestamp", None)
    core.setdefault("lastTimestamp", None)
    core.setdefault("reportingComponent", "")
    core.setdefault("reportingInstance", "")
    return core


def to_events_v1(event: Obj) -> Obj:
    """A stored (core/v1) Event as events.k8s.io/v1 serves it."""
    out = {"apiVersion": EVENTS_API_VERSION, "kind": "Event", **_base(event)}
    for new, old in _RENAMED.items():
        if event.get(old) not in (None, "", 0, {}):
            out[new] = copy.deepcopy(event[old])
    for name in _SHARED:
        if event.get(name) not in (None, "", [], {}):
            out[name] = copy.deepcopy(event[name])
    out.setdefault("eventTime", None)  # `json:"eventTime"`: never omitted
    return out


def selectable(event: Obj) -> Obj:
    """The core/v1 field set of an Event (``ToSelectableFields``), shaped for ``FieldSelector.matches``."""
    source = _object(event.get("source"))
    return {"metadata": event.get("metadata") or {}, "involvedObject": event.get("involvedObject") or {},
            "reason": event.get("reason") or "", "type": event.get("type") or "",
            "reportingComponent": event.get("reportingComponent") or "",
            "source": source.get("component") or event.get("reportingComponent") or ""}


def core_selector(selector: FieldSelector) -> FieldSelector:
    """An events.k8s.io/v1 field selector (already checked against ``FIELD_LABELS``) over the core/v1 field set."""
    return FieldSelector(tuple(FieldRequirement(FIELD_LABELS.get(r.field, r.field), r.operator, r.value)
                               for r in selector.requirements))


# --- validation ---------------------------------------------------------------------------------------------


def _time(value: Any, path: str) -> datetime.datetime | None:
    """A metav1.Time/MicroTime value; 400 (the decoder's refusal) for a string that is not RFC 3339."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ApiError(400, "BadRequest", f'Event in version "v1" cannot be handled as a Event: {path}: '
                                          f"expected a string, got {value!r}")
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ApiError(400, "BadRequest", f'Event in version "v1" cannot be handled as a Event: parsing time '
                                          f'"{value}" as "2006-01-02T15:04:05Z07:00": cannot parse') from None
    return parsed


def _text(event: Obj, name: str) -> str:
    value = event.get(name)
    return value if isinstance(value, str) else ""


def _legacy(event: Obj) -> list[str]:
    """``legacyValidateEvent``: on every write, through either API."""
    errors: list[str] = []
    namespace = str((event.get("metadata") or {}).get("namespace") or "")
    involved = _object(event.get("involvedObject"))
    involved_namespace = str(involved.get("namespace") or "")
    if _time(event.get("eventTime"), "eventTime") is None:
        if not involved_namespace:
            if namespace not in ("", "default"):
                errors.append(invalid("involvedObject.namespace", involved_namespace, "does not match event.namespace"))
        elif namespace != involved_namespace:
            errors.append(invalid("involvedObject.namespace", involved_namespace, "does not match event.namespace"))
    else:
        if not involved_namespace and namespace not in ("default", "kube-system"):
            errors.append(invalid("involvedObject.namespace", involved_namespace, "does not match event.namespace"))
        controller = _text(event, "reportingComponent")
        if not controller:
            errors.append(required("reportingController"))
        errors += [invalid("reportingController", controller, m) for m in qualified_name(controller)]
        instance, action, reason = _text(event, "reportingInstance"), _text(event, "action"), _text(event, "reason")
        if not instance:
            errors.append(required("reportingInstance"))
        if byte_size(instance) > REPORTING_INSTANCE_LIMIT:
            errors.append(invalid("reportingInstance", "", f"can have at most {REPORTING_INSTANCE_LIMIT} characters"))
        if not action:
            errors.append(required("action"))
        if byte_size(action) > ACTION_LIMIT:
            errors.append(invalid("action", "", f"can have at most {ACTION_LIMIT} characters"))
        if not reason:
            errors.append(required("reason"))
        if byte_size(reason) > REASON_LIMIT:
            errors.append(invalid("reason", "", f"can have at most {REASON_LIMIT} characters"))
        if byte_size(_text(event, "message")) > NOTE_LIMIT:
            errors.append(invalid("message", "", f"can have at most {NOTE_LIMIT} characters"))
    errors += [invalid("namespace", namespace, m) for m in dns1123_subdomain(namespace)]
    return errors


def _series(event: Obj) -> list[str]:
    """``validateV1EventSeries``."""
    series = event.get("series")
    if not isinstance(series, dict):
        return []
    errors = []
    count = series.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 2:
        errors.append(invalid("series.count", "", "should be at least 2"))
    if _time(series.get("lastObservedTime"), "series.lastObservedTime") is None:
        errors.append(required("series.lastObservedTime"))
    return errors


_IMMUTABLE = ("involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count", "type",
              "eventTime", "action", "related", "reportingComponent", "reportingInstance")
_IMMUTABLE_PATHS = {"reportingComponent": "reportingController"}


def _empty(value: Any) -> Any:
    """Unset and zero are the same value to the typed struct."""
    return None if value in (None, "", 0, {}, []) else value


def validate(event: Obj, old: Obj | None, strict: bool) -> list[str]:
    """The field errors of writing ``event`` (core/v1 form) over ``old``; ``strict`` for a write through
    events.k8s.io/v1."""
    errors = _legacy(event)
    if not strict:
        return errors
    if old is None:
        errors += _series(event)
        if _time(event.get("eventTime"), "eventTime") is None:
            errors.append(required("eventTime"))
        if event.get("type") not in ("Normal", "Warning"):
            errors.append(invalid("type", "", f"has invalid value: {event.get('type') or ''}"))
        for name in ("firstTimestamp", "lastTimestamp", "count"):
            if _empty(event.get(name)) is not None:
                errors.append(invalid(name, "", "needs to be unset"))
        source = _object(event.get("source"))
        if source.get("component") or source.get("host"):
            errors.append(invalid("source", "", "needs to be unset"))
        return errors
    if _empty(event.get("series")) != _empty(old.get("series")):
        errors += _series(event)
    for name in _IMMUTABLE:
        if _empty(event.get(name)) != _empty(old.get(name)):
            errors.append(invalid(_IMMUTABLE_PATHS.get(name, name), event.get(name), "field is immutable"))
    return errors
