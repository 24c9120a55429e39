"""A minimal stand-in for the kube-apiserver's GET endpoints, for the webhook's owner reads.

Test equipment, not the system under test: it serves stored objects at their real REST
paths (404 Status otherwise), counts every read, and can be told to fail a path (HTTP
status or delay) or to answer it slowly, so tests can check what the webhook does when the API
misbehaves.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

from gang.adapters.table import ADAPTERS
from gang.kinds import INTERMEDIATE, NAMESPACE, api_path, split_api_version

_KINDS = {(k.group, k.kind): k for k in [*INTERMEDIATE.values(), NAMESPACE, *(a.kind for a in ADAPTERS)]}


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
                path = self.path.split("?")[0]
                with stub._lock:
                    stub.reads[path] += 1
                    status, delay = stub.failures.get(path, (0, 0.0))
                    obj = stub.objects.get(path)
                if delay:
                    time.sleep(delay)
                body = json.dumps(obj).encode() if obj is not None else None
                if body is None and stub.generate is not None:
                    body = stub.generate(path)
                if path == "/version":
                    status, body = status or 200, b'{"major": "1", "minor": "31", "gitVersion": "v1.31.0-stub"}'
                elif not status:
                    status = 200 if body is not None else 404
                if status != 200:
                    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                                       "reason": "NotFound" if status == 404 else "InternalError"}).encode()
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

    def path_of(self, obj: dict[str, Any]) -> str:
        group, _ = split_api_version(obj["apiVersion"])
        meta = obj["metadata"]
        return api_path(_KINDS[(group, obj["kind"])], obj["apiVersion"], meta.get("namespace"), meta["name"])

    def put(self, *objects: dict[str, Any]) -> None:
        with self._lock:
            for obj in objects:
                self.objects[self.path_of(obj)] = obj

    def fail(self, obj: dict[str, Any], status: int = 500, delay: float = 0.0) -> None:
        with self._lock:
            self.failures[self.path_of(obj)] = (status, delay)

    def slow(self, *objects: dict[str, Any], seconds: float) -> None:
        """Answer every read of these objects (a correct answer) only after ``seconds``."""
        with self._lock:
            for obj in objects:
                self.failures[self.path_of(obj)] = (0, seconds)

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
