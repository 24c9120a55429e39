"""PodGroups on the local cluster: the shipped CRD installed as `kubectl apply` would, PodGroups read as stored, the
phases a watch sees them go through, and the controller's requests on them from the emulator's audit."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch
from kubernetes.client import ApiException

from cluster.audit import Record

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "deploy" / "base" / "podgroup-crd.yaml"
GROUP, VERSION, PLURAL = "scheduling.kubenexus.io", "v1alpha1", "podgroups"
MANAGED_BY = ("app.kubernetes.io/managed-by", "kubenexus-gate-controller")
Obj = dict[str, Any]


def crd() -> Obj:
    loaded: Obj = yaml.safe_load(CRD_FILE.read_text())
    return loaded


def install_crd(api_client: client.ApiClient) -> None:
    """The PodGroup CRD of deploy/base, created once (already there: left as is)."""
    with contextlib.suppress(ApiException):
        client.ApiextensionsV1Api(api_client).create_custom_resource_definition(crd())


def podgroups(api_client: client.ApiClient, ns: str) -> dict[str, Obj]:
    response = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, _preload_content=False)
    return {o["metadata"]["name"]: o for o in json.loads(response.data)["items"]}


def podgroup(api_client: client.ApiClient, ns: str, name: str) -> Obj | None:
    return podgroups(api_client, ns).get(name)


def phase(obj: Obj | None) -> str | None:
    return ((obj or {}).get("status") or {}).get("phase")


def condition(obj: Obj | None, type_: str) -> Obj:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("type") == type_), {})


class Phases:
    """Every PodGroup version a watch of one namespace sees, to tell the phases each went through, in order."""

    def __init__(self, api_client: client.ApiClient, ns: str) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._ns = ns
        self._lock = threading.Lock()
        self.seen: dict[str, list[Obj]] = {}
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            for event in self._watch.stream(self._custom.list_namespaced_custom_object, GROUP, VERSION, self._ns,
                                            PLURAL, timeout_seconds=300):
                obj = event["object"]
                with self._lock:
                    self.seen.setdefault(obj["metadata"]["name"], []).append(obj)

    def of(self, name: str) -> list[str]:
        """The phases PodGroup ``name`` was written with, consecutive repeats folded."""
        with self._lock:
            phases = [phase(o) for o in self.seen.get(name, [])]
        return [p for i, p in enumerate(phases) if p and (i == 0 or p != phases[i - 1])]

    def stop(self) -> None:
        self._watch.stop()


@contextlib.contextmanager
def watching(api_client: client.ApiClient, ns: str) -> Iterator[Phases]:
    phases = Phases(api_client, ns)
    try:
        yield phases
    finally:
        phases.stop()


def writes(records: list[Record], ns: str, name: str | None = None) -> list[Record]:
    """The requests that wrote PodGroups of ``ns`` (``name``'s only, when given): creations and patches."""
    return [r for r in records if r.request.resource == PLURAL and r.request.namespace == ns
            and r.request.verb in ("create", "patch", "update") and (name is None or r.request.name in (name, ""))]
