"""What the owner walk reads objects from: the source protocol, the decision's deadline, an in-memory source.

The API source and its cache are I/O and live in ``kube`` (kube/source.py, kube/owner_cache.py).

The owner walk asks a source for objects by (apiVersion, kind, namespace, name). ``None``
means the object does not exist (404); :class:`LookupFailed` means we could not find out
(timeout, 5xx, 403, or the decision's :class:`Deadline` has passed) and the caller must not guess.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gang.kinds import Kind, split_api_version

Obj = dict[str, Any]
Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" if cluster-scoped), name


class LookupFailed(Exception):
    """The API could not answer; the reason is safe to show to users."""


class Deadline:
    """The moment all API reads for one decision must be done by (admission must answer in time)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._at = clock() + seconds

    def remaining(self) -> float:
        return self._at - self._clock()

    def __str__(self) -> str:
        return f"the {self.seconds:g}s deadline for this decision's API reads has passed"


class ObjectSource(Protocol):
    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        """The object, or None on 404. ``uid``, when given, is the uid the caller expects; API time
        spent is bounded by ``deadline`` (None: only by each read's own timeout)."""


class MemorySource:
    """Objects given up front (``kubenexus explain``, tests): a missing object is a 404."""

    def __init__(self, objects: Iterable[Obj]) -> None:
        self._objects: dict[tuple[str, str, str, str], Obj] = {}
        for obj in objects:
            meta = obj.get("metadata") or {}
            group, _ = split_api_version(str(obj.get("apiVersion", "")))
            key = (group, str(obj.get("kind", "")), meta.get("namespace") or "", str(meta.get("name", "")))
            self._objects[key] = obj

    def get(self, kind: Kind, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        group, _ = split_api_version(api_version)
        return self._objects.get((group, kind.kind, namespace or "", name))
