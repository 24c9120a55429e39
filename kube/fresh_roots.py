"""Root objects as they are now, for admission: an edit to a job (opt-out, min-available, group name) decides the
pods created after it, never a copy the owner cache read before it.

Each webhook worker watches every root resource the cluster serves (``kube/root_watch.py``), changes only
(``Informer(current_only=True)``: nothing is listed, nothing held but the owner cache's own entries), and keeps the
owner cache's copies current: a changed root replaces the copy it holds, a deleted one drops it, and a read that was
in flight meanwhile is not stored (``CachedSource.refresh``). Root reads go through the owner cache while their
kind's watch is open; while it is not (starting, failing, restarting: changes may have been missed, so the cache's
copies of that kind are dropped, ``RESET``) they go to ``fallback``, a cache of ``FALLBACK_TTL_SECONDS``. A kind the
cluster does not serve has no objects to go stale: its reads go through the owner cache as any owner's.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from gang import slim
from gang.adapters.table import ROOT_RESOURCES, RootResource, adapter_for
from gang.objects import Deadline, Key, Obj, ObjectSource
from kube.informer import Decoder, Informer
from kube.owner_cache import CachedSource
from kube.root_watch import NOT_SERVED, RootWatch, path_of

FALLBACK_TTL_SECONDS = 1.0  # how stale a root may be while its kind's watch is not open
WATCH_SECONDS = 300  # each watch's timeoutSeconds


class FreshRoots:
    """An ObjectSource in front of ``cache`` (the owner cache) that keeps its roots current (module docstring)."""

    def __init__(self, api_client: Any, cache: CachedSource, fallback: ObjectSource, timeout: float = 10.0) -> None:
        self._client, self._cache, self._fallback = api_client, cache, fallback
        # (group, kind) -> per version: True watching, False not (yet), None not served
        self._state: dict[tuple[str, str], dict[str, bool | None]] = {}
        self._versions: dict[tuple[str, str], tuple[str, ...]] = {}  # the versions a root may be read at
        for resource in ROOT_RESOURCES:
            key = (resource.group, resource.kind)
            self._versions[key] = (*self._versions.get(key, ()), resource.version)
        self.watch = RootWatch(api_client, self._informer, self._status, timeout=timeout)

    def start(self) -> FreshRoots:
        self.watch.start()
        return self

    def stop(self) -> None:
        self.watch.stop()

    def fresh(self, group: str, kind: str) -> bool:
        """Whether the owner cache's copies of this kind are kept current (or need not be: it is not served)."""
        states = self._state.get((group, kind))
        if not states:
            return (group, kind) not in self._versions  # not a root kind: none of our business
        return any(state is True for state in states.values()) or all(state is None for state in states.values())

    def get(self, kind: Any, api_version: str, namespace: str | None, name: str,
            uid: str | None = None, deadline: Deadline | None = None) -> Obj | None:
        source = self._cache if self.fresh(kind.group, kind.kind) else self._fallback
        return source.get(kind, api_version, namespace, name, uid, deadline)

    # --- the watches --------------------------------------------------------------------------------------

    def _informer(self, resource: RootResource) -> Informer:
        adapter = adapter_for(f"{resource.group}/{resource.version}", resource.kind)
        assert adapter is not None, resource  # ROOT_RESOURCES are the adapters' kinds
        decoder = Decoder(json.loads, slim.watch_event_decoder(adapter.kind))  # (no list page: current_only)
        return Informer(self._client, path_of(resource), functools.partial(self._event, resource),
                        on_watching=functools.partial(self._watching, resource), timeout_seconds=WATCH_SECONDS,
                        decoder=decoder, current_only=True, backoff_max=30.0)

    def _status(self, resource: RootResource, problem: str) -> None:
        """Discovery's answer: not served (None), or failed (False: reads bypass the cache until a watch opens)."""
        self._state.setdefault((resource.group, resource.kind), {})[resource.version] = \
            None if problem.startswith(NOT_SERVED) else False

    def _watching(self, resource: RootResource, open_: bool) -> None:
        self._state.setdefault((resource.group, resource.kind), {})[resource.version] = open_

    def _event(self, resource: RootResource, event: str, obj: Obj) -> None:
        if event == "RESET":
            self._cache.forget(resource.kind)
            return
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        versions = [resource.version, *(v for v in self._versions[(resource.group, resource.kind)]
                                        if v != resource.version)]
        keys: list[Key] = [(f"{resource.group}/{version}", resource.kind, namespace, name) for version in versions]
        self._cache.refresh(keys, None if event == "DELETED" else obj)
