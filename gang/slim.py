"""Decode owner objects from the API's JSON keeping only the fields gang decisions read.

An owner as the apiserver returns it carries managedFields, status, kubectl's
last-applied-configuration and whole pod templates (images, env, commands, volumes, probes) that
no decision looks at; the owner cache holds thousands of them per process. msgspec decodes
straight into the shapes below and skips the rest while parsing, so neither the cache nor the
decode pays for it. The result is plain dicts and lists, the same shape ``json.loads`` gives with
the other keys left out.

What is kept, per kind, is exactly what reads it: the owner walk (``gang/owners.py``: names, uids,
ownerReferences), the opt-in rules (``gang/decide.py``: namespace labels, the root's
annotations the contract reads, ``keys.read_on_roots``), the adapters (each one's ``spec_shape``, next to it in
``workloads/<kind>/adapter.py``: the spec fields it reads and, through ``expected_from_template``,
the pod template fields ``gang/resources.py`` counts; shared pieces in ``gang/shapes.py``), the
PodGroup a pod without a supported root names (``gang/decide.py``: its labels, uid and ``spec.minMember``) and the
controller (``controller/owners.py``: root annotations). tests/test_owner_slim.py runs every
operator scenario on full and on slim owners and compares the decisions. An adapter that reads a
new field must add it to its shape.

Leaves are declared ``Any`` so an unexpected value reaches the adapter as it is; an object whose
*structure* differs from these shapes (a list where an object belongs) fails the typed decode and
is decoded in full instead: the adapters judge it, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

import msgspec

from gang import keys
from gang.adapters.table import ADAPTERS
from gang.kinds import INTERMEDIATE, NAMESPACE, POD_GROUP, Kind
from gang.shapes import Meta, Object, PodGroupSpec


def _with_spec(name: str, spec: type) -> type:
    """An object type whose ``spec`` has the given shape."""
    fields = {"apiVersion": Any, "kind": Any, "metadata": Meta, "spec": spec}
    shape: type = TypedDict(name, fields, total=False)  # type: ignore[misc]
    return shape


# (group, kind) -> the shape of its objects: a root kind with its adapter's spec shape (where two adapters serve
# one kind, MPIJob v1 and v2beta1, the one registered last, whose shape covers the other's); kinds read only for
# their metadata (intermediate pods and StatefulSets, Namespace, roots whose adapter reads no spec) as Object.
_SHAPES: dict[tuple[str, str], type] = {
    **{(k.group, k.kind): Object for k in (*INTERMEDIATE.values(), NAMESPACE)},
    **{(a.kind.group, a.kind.kind): _with_spec(f"_{a.kind.kind}", a.spec_shape) if a.spec_shape else Object
       for a in ADAPTERS},
    (POD_GROUP.group, POD_GROUP.kind): _with_spec("_PodGroup", PodGroupSpec),
}
_DECODERS: dict[tuple[str, str], Callable[[bytes], Any]] = {
    key: msgspec.json.Decoder(shape).decode for key, shape in _SHAPES.items()}
_FULL = msgspec.json.Decoder().decode


def shaped_kinds() -> set[tuple[str, str]]:
    """The (group, kind) pairs with a slim shape (a test checks every kind the walk reads has one)."""
    return set(_SHAPES)


def decode(kind: Kind, body: bytes) -> Any:
    """The object in ``body`` with only what decisions read; raises ``ValueError`` on invalid JSON."""
    slim = _DECODERS.get((kind.group, kind.kind))
    try:
        try:
            obj = slim(body) if slim else _FULL(body)
        except msgspec.ValidationError:  # valid JSON of an unexpected structure: keep all of it
            return _FULL(body)
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from exc
    return _trimmed(obj) if slim else obj


def _trimmed(obj: Any) -> Any:
    """``obj`` (decoded slim) with only the annotations the contract reads on roots."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if meta and "annotations" in meta:
        ours = {k: v for k, v in meta["annotations"].items() if keys.read_on_roots(k)}
        if ours:
            meta["annotations"] = ours
        else:
            del meta["annotations"]
    return obj


def watch_event_decoder(kind: Kind) -> Callable[[bytes], Any]:
    """A watch event (``{"type", "object"}``) of objects of ``kind``, the object as ``decode`` keeps it (an ERROR
    event's Status, or an object of another structure, in full); raises ``ValueError`` on invalid JSON."""
    shape = _SHAPES.get((kind.group, kind.kind), Object)
    event: type = TypedDict(f"_{kind.kind}Event", {"type": str, "object": shape}, total=False)  # type: ignore[misc]
    typed = msgspec.json.Decoder(event).decode

    def decode_event(line: bytes) -> Any:
        try:
            try:
                found = typed(line)
            except msgspec.ValidationError:
                return _FULL(line)
        except msgspec.DecodeError as exc:
            raise ValueError(str(exc)) from exc
        if found.get("type") == "ERROR":  # its Status, with the code and message the watcher reads
            return _FULL(line)
        _trimmed(found.get("object"))
        return found

    return decode_event
