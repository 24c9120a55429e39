"""The apiserver's read path alone: stored objects served at their REST paths, every read counted.

A stand-in for the kube-apiserver where only GETs matter (the webhook's owner reads) and ``LocalCluster`` would
cost more than what is measured: webhook tests and benchmarks. Like the rest of the emulator it follows the
Kubernetes API, not the product: paths come from each object's apiVersion and kind the way client-go derives a
resource from a kind, so a product that asks at a wrong path gets a 404 here as from a cluster. It can be told
to fail a path (HTTP status or delay) or to answer it slowly, so tests can check what the webhook does when the
API misbehaves. A collection path is a LIST of the objects stored under it (label and name selectors); watches are
refused (405, as the apiserver answers for a resource without the watch verb), so a client that watches falls back
to its reads.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

from cluster.selectors import parse_field_selector, parse_label_selector

#: (group, kind) of the cluster-scoped kinds a test may store here; every other kind is namespaced.
_CLUSTER_SCOPED = frozenset({("", "Namespace"), ("", "Node"), ("trainer.kubeflow.org", "ClusterTrainingRuntime"),
                             ("scheduling.kubenexus.io", "Queue")})


def resource_of(kind: str) -> str:
    """meta.UnsafeGuessKindToResource (apimachinery): the lowercased kind, pluralised ("ies" for a trailing "y",
    "es" for a trailing "s"), which is how the core API and the operators' CRDs name every kind stored here."""
    singular = kind.lower()
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


def path_of(obj: dict[str, Any]) -> str:
    """The REST path of ``obj``: ``/api/v1/...`` for the core group, ``/apis/<group>/<version>/...`` otherwise."""
    api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    group, _, _ = api_version.rpartition("/")
    base = f"/apis/{api_version}" if group else f"/api/{api_version}"
    scope = "" if (group, kind) in _CLUSTER_SCOPED else f"/namespaces/{meta.get('namespace')}"
    return f"{base}{scope}/{resource_of(kind)}/{meta['name']}"


class StubApiServer:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.reads: Counter[str] = Counter()
        self.failures: dict[str, tuple[int, float]] = {}
        # Objects too many to store (benchmarks): the JSON body for a path that is not stored, or None (404).
        self.generate: Callable[[str], bytes | None] | None = None
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path, _, query = self.path.partition("?")
                params = dict(urllib.parse.parse_qsl(query))
                with stub._lock:
                    stub.reads[path] += 1
                    status, delay = stub.failures.get(path, (0, 0.0))
                    obj = stub.objects.get(path)
                    listed = stub._list(path, params) if obj is None else None
                    for item in (listed or {}).get("items", []):  # a failing object fails the lists it is in
                        status, delay = stub.failures.get(path_of(item), (status, delay))
                if delay:
                    time.sleep(delay)
                if params.get("watch") in ("true", "1"):
                    status = status or 405  # no watch here: as for a resource without the watch verb
                body = json.dumps(obj if listed is None else listed).encode() if obj is not None or listed else None
                if body is None and stub.generate is not None:
                    body = stub.generate(path)
                if path == "/version":
                    status, body = status or 200, b'{"major": "1", "minor": "31", "gitVersion": "v1.31.0-stub"}'
                elif not status:
                    status = 200 if body is not None else 404
                if status != 200:
                    reason = {404: "NotFound", 405: "MethodNotAllowed"}.get(status, "InternalError")
                    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                       "reason": reason}).encode()
                assert body is not None  # a 200 always has one
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up on a slow answer closed its end: nothing to report

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _list(self, path: str, params: dict[str, str]) -> dict[str, Any] | None:
        """A LIST of the stored objects directly under collection ``path`` (``/api/v1/namespaces``,
        ``/apis/batch/v1/namespaces/ns/jobs``), by ``labelSelector`` and the ``metadata.name``/``metadata.namespace``
        field selectors; None when ``path`` names an object, not a collection."""
        parts = path.strip("/").split("/")
        after_version = parts[2:] if parts[0] == "api" else parts[3:]
        if len(after_version) % 2 == 0:
            return None
        prefix = path.rstrip("/") + "/"
        items = [o for p, o in sorted(self.objects.items()) if p.startswith(prefix) and "/" not in p[len(prefix):]]
        labels = parse_label_selector(params.get("labelSelector", ""))
        fields = parse_field_selector(params.get("fieldSelector", ""), ("metadata.name", "metadata.namespace"))
        kept = [o for o in items if labels.matches(o["metadata"].get("labels") or {}) and fields.matches(o)]
        return {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": kept}

    def put(self, *objects: dict[str, Any]) -> None:
        with self._lock:
            for obj in objects:
                self.objects[path_of(obj)] = obj

    def fail(self, obj: dict[str, Any], status: int = 500, delay: float = 0.0) -> None:
        """Every read of ``obj`` fails with ``status`` (after ``delay``): its GETs and the LISTs that select it."""
        with self._lock:
            self.failures[path_of(obj)] = (status, delay)

    def slow(self, *objects: dict[str, Any], seconds: float) -> None:
        """Answer every read of these objects (a correct answer) only after ``seconds``."""
        with self._lock:
            for obj in objects:
                self.failures[path_of(obj)] = (0, seconds)

    def clear(self) -> None:
        with self._lock:
            self.objects.clear()
            self.reads.clear()
            self.failures.clear()

    def total_reads(self, exclude_version: bool = True) -> int:
        with self._lock:
            return sum(n for p, n in self.reads.items() if not (exclude_version and p == "/version"))

    def write_kubeconfig(self, path: str) -> str:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "stub",
            "clusters": [{"name": "stub", "cluster": {"server": self.url}}],
            "users": [{"name": "stub", "user": {"token": "stub-token"}}],
            "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
        }
        with open(path, "w", encoding="utf-8") as handle:
            yaml.safe_dump(config, handle)
        os.chmod(path, 0o600)
        return path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
