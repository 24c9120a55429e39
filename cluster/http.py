"""HTTPS front of the emulated apiserver: bearer-token authentication, JSON bodies, chunked watches.

One thread per connection (``ThreadingHTTPServer``), as the apiserver serves requests concurrently; a
``Latency`` set on the server delays matching requests in their own thread before they are handled (a slow
apiserver, for fault injection), so other connections are served meanwhile. In-process components call the
``ApiServer`` directly and are never delayed.
"""

from __future__ import annotations

import base64
import json
import os
import random
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

from cluster.admission import User
from cluster.apiserver import ApiServer
from cluster.audit import request_info
from cluster.store import ApiError


@dataclass(frozen=True)
class Latency:
    """A delay of ``low``..``high`` seconds (uniform) for requests of ``users``, ``verbs`` and ``resources`` (None:
    all), the verb and resource as the authorizer names them (get, list, watch, create, ...; pods, jobs, ...)."""

    low: float
    high: float
    users: frozenset[str] | None = None
    verbs: frozenset[str] | None = None
    resources: frozenset[str] | None = None

    def delay(self, user: User, method: str, path: str) -> float:
        if self.users is not None and user.username not in self.users:
            return 0.0
        info = request_info(method, path) if self.verbs is not None or self.resources is not None else None
        if info is not None and self.verbs is not None and info.verb not in self.verbs:
            return 0.0
        if info is not None and self.resources is not None and info.resource not in self.resources:
            return 0.0
        return random.uniform(self.low, self.high)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away before its answer (it timed out on a slow request) is no server error: the
        apiserver logs nothing for it; anything else is printed as socketserver does."""
        if not isinstance(sys.exc_info()[1], ConnectionError | ssl.SSLError | TimeoutError):
            super().handle_error(request, client_address)


class ApiHttpServer:
    """Serves ``ApiServer`` on loopback over TLS until ``stop()``."""

    def __init__(self, api: ApiServer, cert: str, key: str, users: dict[str, User], port: int = 0) -> None:
        self.api, self.users = api, users
        self.latency: Latency | None = None  # set and cleared at run time
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
                user = server.users.get(token)
                if user is None:
                    self._send(401, ApiError(401, "Unauthorized", "Unauthorized").status(), [])
                    return
                latency = server.latency
                if latency is not None:
                    time.sleep(latency.delay(user, self.command, self.path))
                headers = {k.lower(): v for k, v in self.headers.items()}
                response = server.api.handle(self.command, self.path, headers, body, user)
                if response.stream is None:
                    self._send(response.status, response.body, response.warnings)
                    return
                self.send_response(response.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for event in response.stream:
                        line = json.dumps(event).encode() + b"\n"
                        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                    self.close_connection = True

            def _send(self, status: int, body: Any, warnings: list[str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for warning in warnings:  # RFC 7234 warning header, as the apiserver sends admission warnings
                    self.send_header("Warning", _warning_header(warning))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815

        self._server = _Server(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}"
        api.address = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="apiserver", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.api.store.close()
        self._server.shutdown()
        self._server.server_close()


def _warning_header(text: str) -> str:
    """A ``Warning`` header value as apimachinery's ``NewWarningHeader`` makes it: code 299, agent "-", the text as
    an RFC 7230 quoted-string (backslash and double quote escaped), so clients can parse a text that contains them."""
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{quoted}"'


def write_kubeconfig(path: str, url: str, ca_cert: str, token: str, name: str = "kubenexus-local") -> str:
    """A kubeconfig for one user of the local cluster (file mode 0600)."""
    with open(ca_cert, "rb") as handle:
        ca_data = base64.b64encode(handle.read()).decode()
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": url, "certificate-authority-data": ca_data}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
    }
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(config, handle)
    os.chmod(path, 0o600)
    return path
