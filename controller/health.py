"""The gate controller's probe and metrics endpoints: ``/healthz``, ``/readyz``, ``/metrics``.

Plain HTTP on its own small threaded server, because the kubelet probes it and Prometheus
scrapes it without client certificates, and a slow scrape must never delay a probe. Liveness
and readiness are separate questions: a standby replica (not the leader) is healthy and ready to
take over; ``healthy`` going false makes the kubelet restart the container, so it should only
report what a restart would fix (a stuck decision loop), never an unreachable API server.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)


class HealthServer:
    def __init__(self, host: str, port: int, metrics_registry: CollectorRegistry, ready: Callable[[], bool],
                 healthy: Callable[[], bool]) -> None:
        probes = {"/healthz": (healthy, 500, "unhealthy"), "/readyz": (ready, 503, "not ready")}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, generate_latest(metrics_registry), CONTENT_TYPE_LATEST)
                elif path in probes:
                    check, failure, reason = probes[path]
                    try:
                        ok = check()
                    except Exception as exc:  # a failing check is an answer, not a crash of the probe
                        ok, reason = False, f"{reason}: {exc}"
                    if ok:
                        self._reply(200, b"ok")
                    else:
                        self._reply(failure, reason.encode())
                else:
                    self._reply(404, b"not found")

            def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("%s " + format, self.address_string(), *args)  # probes every few seconds: not INFO

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        # A short poll interval: stop() waits for the serving loop to notice, up to one interval.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="health-server",
                                        daemon=True)

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one the OS chose when constructed with port 0)."""
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
