"""``kubenexus webhook``: the Flask app under gunicorn (gthread workers) with TLS ≥ 1.2.

Each worker builds its own API client and owner cache after the fork. Metrics are shared
through ``PROMETHEUS_MULTIPROC_DIR``, which must be set before prometheus_client is imported.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from gang.config import Config
from gang.objects import ApiSource, CachedSource, LookupFailed, new_api_client

READY_CACHE_SECONDS = 5.0


def api_client(config: Config) -> Any:
    """The webhook's ApiClient: one retry on a dropped connection, so admission latency stays bounded."""
    return new_api_client(config.kubeconfig, pool_size=max(config.threads, 4), retries=1)


def cert_paths(config: Config) -> tuple[str, str]:
    return os.path.join(config.cert_dir, "tls.crt"), os.path.join(config.cert_dir, "tls.key")


class Readiness:
    """Ready when the serving certificate loads and the apiserver answers; cached briefly."""

    def __init__(self, config: Config, ping: Callable[[], None]) -> None:
        self._config, self._ping = config, ping
        self._lock = threading.Lock()
        self._until, self._answer = 0.0, (False, "not checked")

    def _check(self) -> tuple[bool, str]:
        cert, key = cert_paths(self._config)
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            return False, f"serving certificate does not load: {exc}"
        try:
            self._ping()
        except LookupFailed as exc:
            return False, f"apiserver not reachable: {exc}"
        return True, "ready"

    def __call__(self) -> tuple[bool, str]:
        with self._lock:
            if time.monotonic() >= self._until:
                self._answer = self._check()
                self._until = time.monotonic() + READY_CACHE_SECONDS
            return self._answer


def build_app(config: Config) -> Any:
    from webhook.app import create_app
    from webhook.metrics import record_read

    api = ApiSource(api_client(config), config.api_timeout_seconds, on_read=record_read)
    source = CachedSource(api, config.owner_cache_ttl_seconds, config.owner_cache_max_entries)
    return create_app(config, source, Readiness(config, api.ping))


def _tls_context(conf: Any, factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    context = factory()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def gunicorn_options(config: Config, bind: str) -> dict[str, Any]:
    """The shipped gunicorn settings (also used by the benchmark)."""
    cert, key = cert_paths(config)
    return {
        "bind": bind,
        "worker_class": "gthread",
        "workers": config.workers,
        "threads": config.threads,
        "certfile": cert,
        "keyfile": key,
        "ssl_context": _tls_context,
        "keepalive": 75,  # the apiserver reuses connections; keep them well past its idle time
        "timeout": 30,
        "graceful_timeout": 25,
        "accesslog": None,
        "child_exit": _child_exit,
        "logconfig_dict": {
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"console": {"()": "webhook.logs.BackgroundJsonHandler"}},
            "root": {"level": config.log_level, "handlers": ["console"]},
            "loggers": {"gunicorn.error": {"level": "INFO", "handlers": ["console"], "propagate": False}},
        },
    }


def serve(config: Config, bind: str | None = None) -> None:
    """Run the webhook until terminated."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="kubenexus-metrics-")
    from gunicorn.app.base import BaseApplication

    class WebhookServer(BaseApplication):
        def load_config(self) -> None:
            for name, value in gunicorn_options(config, bind or f"0.0.0.0:{config.port}").items():
                self.cfg.set(name, value)

        def load(self) -> Any:
            return build_app(config)

    WebhookServer().run()
