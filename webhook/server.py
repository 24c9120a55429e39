"""``kubenexus webhook``: the Flask app under gunicorn (gthread workers, webhook/worker.py) with TLS ≥ 1.2.

Each worker builds its own API client and owner cache after the fork. Metrics are shared
through ``PROMETHEUS_MULTIPROC_DIR``, which ``serve`` sets (when the environment does not) before
webhook/metrics.py is imported; that module makes prometheus_client use it even if something imported
prometheus_client earlier.

Certificates. gunicorn asks ``ssl_context`` for a context on every new connection; ours hands out a
cached one that is rebuilt when ``tls.crt``/``tls.key`` change on disk (certs/reload.py), so a
renewed certificate is served from the next connection on, without a restart, in either
``certs.mode``. With ``self-managed`` the webhook also runs ``certs ensure``:

- once at start-up, in the process that becomes the gunicorn master, before any worker is forked
  and before gunicorn checks that the files exist; its API client is closed again, so the master
  forks with no threads and no open connections of ours;
- then every ``certs.checkIntervalSeconds`` in a thread of each *worker*, started after the fork
  (``post_worker_init``). Not in the master: gunicorn forks a worker whenever one is replaced, and a
  thread of the master caught holding a lock (logging, urllib3's pool, OpenSSL) at that moment
  would leave the child deadlocked. Workers are long-lived, already threaded (gthread), and
  restarted by the master if they die, which restarts the loop too. The workers of one pod
  serialise their passes on a file lock (they write the same certificate directory); ``ensure`` is
  idempotent and safe across replicas, so the extra passes cost a few GETs.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from certs.reload import pair_problem, reloading_context
from gang.config import Config
from gang.objects import LookupFailed
from kube.client import new_api_client
from kube.events import EventRecorder
from kube.fresh_roots import FALLBACK_TTL_SECONDS as ROOT_FALLBACK_TTL_SECONDS
from kube.fresh_roots import FreshRoots
from kube.namespaces import FALLBACK_TTL_SECONDS, ListedNamespaces, WatchedNamespaces
from kube.owner_cache import CachedSource
from kube.queues import WatchedQueues
from kube.source import ApiSource

READY_CACHE_SECONDS = 5.0
STARTUP_CERTS_SECONDS = 120.0  # how long start-up waits for a certificate before giving up
log = logging.getLogger("kubenexus.webhook")


def api_client(config: Config, retries: int = 1) -> Any:
    """The webhook's ApiClient; ``retries`` on a dropped connection (0 for owner reads, which ApiSource
    retries itself within the admission deadline)."""
    return new_api_client(config.kubeconfig, pool_size=max(config.threads, 4), retries=retries)


def cert_paths(config: Config) -> tuple[str, str]:
    return os.path.join(config.cert_dir, "tls.crt"), os.path.join(config.cert_dir, "tls.key")


class ApiserverWatch:
    """Whether this worker reaches the apiserver: ``GET /version`` every ``READY_CACHE_SECONDS`` in a
    thread of its own, so neither ``/readyz`` nor admission ever waits for it."""

    def __init__(self, ping: Callable[[], None], on_result: Callable[[bool], None]) -> None:
        self._ping, self._on_result = ping, on_result
        self.status = "not checked yet"

    def check(self) -> None:
        try:
            self._ping()
        except LookupFailed as exc:
            self._on_result(False)
            self.status = f"not reachable: {exc}"
        else:
            self._on_result(True)
            self.status = "reachable"

    def start(self) -> ApiserverWatch:
        def loop() -> None:
            while True:
                self.check()
                time.sleep(READY_CACHE_SECONDS)

        threading.Thread(target=loop, name="apiserver-watch", daemon=True).start()
        return self


class Readiness:
    """Ready when the serving certificate loads (and this worker answers, which it does by answering).

    Not when the apiserver answers: a blip would take every replica out of the Service at once, and
    then no pod is gated (failurePolicy Ignore) or none is created (Fail). Without the apiserver the
    webhook still answers correctly: pods whose owners cannot be read are gated as unresolved for
    the gate controller, and validation needs no reads. Reachability is reported instead, in the
    body and in ``kubenexus_webhook_apiserver_reachable``.
    """

    def __init__(self, config: Config, apiserver: ApiserverWatch) -> None:
        self._config, self._apiserver = config, apiserver
        self._lock = threading.Lock()
        self._until, self._certificate = 0.0, (False, "not checked")

    def _check_certificate(self) -> tuple[bool, str]:
        try:  # the context new connections get: the files as they are now, or the last good pair
            reloading_context(*cert_paths(self._config)).context()
        except ssl.SSLError as exc:
            return False, f"serving certificate does not load: {exc}"
        return True, "ready"

    def __call__(self) -> tuple[bool, str]:
        with self._lock:
            if time.monotonic() >= self._until:
                self._certificate = self._check_certificate()
                self._until = time.monotonic() + READY_CACHE_SECONDS
            ok, reason = self._certificate
        return ok, f"{reason}\napiserver: {self._apiserver.status}\n"


def build_app(config: Config) -> Any:
    """The Flask app of one worker (gunicorn loads it after the fork), with its API client, cache, the watches of
    namespaces, roots and Queues, and checks."""
    from webhook.app import create_app
    from webhook.metrics import APISERVER_REACHABLE, record_cache_size, record_read
    from webhook.skips import SkipNotices

    api = ApiSource(api_client(config, retries=0), config.api_timeout_seconds, on_read=record_read, retries=1)
    owners = CachedSource(api, config.owner_cache_ttl_seconds, config.owner_cache_max_entries,
                          config.owner_cache_max_bytes, on_size=record_cache_size)
    roots = FreshRoots(api_client(config), owners,  # roots as they are now: edits decide the pods created after them
                       CachedSource(api, ROOT_FALLBACK_TTL_SECONDS, config.owner_cache_max_entries,
                                    config.owner_cache_max_bytes), timeout=config.api_timeout_seconds * 5).start()
    listed = CachedSource(ListedNamespaces(api), FALLBACK_TTL_SECONDS, config.owner_cache_max_entries)
    source = WatchedNamespaces(api_client(config), roots, listed).start()
    queues = WatchedQueues(api_client(config)).start()  # for the warnings on roots whose Queue will hold them
    apiserver = ApiserverWatch(api.ping, lambda up: APISERVER_REACHABLE.set(1 if up else 0)).start()
    notices = SkipNotices(EventRecorder(api_client(config), controller="kubenexus-webhook",
                                        instance=f"{socket.gethostname()}_{os.getpid()}"))
    app = create_app(config, source, Readiness(config, apiserver), notices, queues, listed)
    # What is loaded by now (modules, the app, the API client) lives as long as the worker: out of the collector's
    # sight, its full passes walk only what requests leave behind.
    gc.freeze()
    return app


def _tls_context(conf: Any, factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    """Called by gunicorn for every new connection: the current certificate, reloaded when the files change."""
    from webhook.metrics import CERT_EXPIRY  # after PROMETHEUS_MULTIPROC_DIR is set (see run_webhook)

    reloader = reloading_context(conf.certfile, conf.keyfile)
    context = reloader.context()
    if reloader.not_after is not None:
        CERT_EXPIRY.set(reloader.not_after)
    return context


def _start_ensure_loop(config: Config) -> Callable[[Any], None]:
    def post_worker_init(worker: Any) -> None:
        if config.certs_mode == "self-managed":
            from certs.ensure import EnsureLoop

            EnsureLoop(config, lambda: api_client(config)).start()

    return post_worker_init


def _usable_pair(config: Config) -> str | None:
    """Why the certificate files on disk cannot serve, or None."""
    cert, key = cert_paths(config)
    try:
        with open(cert, "rb") as c, open(key, "rb") as k:
            return pair_problem(c.read(), k.read())
    except OSError as exc:
        return f"cannot read {exc.filename}: {exc.strerror}"


def prepare_certificates(config: Config, deadline_seconds: float = STARTUP_CERTS_SECONDS) -> None:
    """Before gunicorn starts: run ``certs ensure`` (self-managed) and wait for a usable pair on disk.

    A failing ensure is retried while there is no usable certificate; with one (a restart, an
    apiserver blip) the webhook starts on it and the periodic loop catches up. Exits 1 if no usable
    pair appears in time (the kubelet may also be the one delivering it, from the mounted Secret), at once when the
    certificate directory does not exist (a mounted volume always does; only ``certs ensure`` could create it).
    """
    deadline = time.monotonic() + deadline_seconds
    delay = 0.5
    if config.certs_mode == "self-managed":
        from certs.ensure import ensure_for_webhook

        client = api_client(config)
        try:
            while True:
                try:
                    ensure_for_webhook(config, client)
                    break
                except Exception as exc:
                    problem = _usable_pair(config)
                    if problem is not None and not os.path.isdir(config.cert_dir):
                        raise SystemExit(f"kubenexus webhook: the certificate directory {config.cert_dir} does not "
                                         f"exist and certs ensure failed ({exc}): create a pair with `kubenexus certs "
                                         f"generate --out {config.cert_dir} ...` and set certs.mode external, or "
                                         "give the webhook a kubeconfig that reaches the apiserver") from None
                    if problem is None:
                        log.warning("certificates: ensure failed at start-up, serving the certificate on disk: %s",
                                    exc)
                        break
                    if time.monotonic() + delay > deadline:
                        raise SystemExit(f"kubenexus webhook: no serving certificate: ensure failed: {exc}") from None
                    log.warning("certificates: ensure failed at start-up, retrying: %s", exc)
                    time.sleep(delay)
                    delay = min(delay * 2, 10.0)
        finally:
            client.close()
    while (problem := _usable_pair(config)) is not None:
        if not os.path.isdir(config.cert_dir):  # nothing will deliver files into a directory that is not there
            raise SystemExit(f"kubenexus webhook: the certificate directory {config.cert_dir} does not exist: create "
                             f"a pair with `kubenexus certs generate --out {config.cert_dir} ...`, or set "
                             "server.certDir")
        if time.monotonic() + delay > deadline:
            raise SystemExit(f"kubenexus webhook: no usable serving certificate in {config.cert_dir}: {problem}")
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def _child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def gunicorn_options(config: Config, bind: str) -> dict[str, Any]:
    """The shipped gunicorn settings (also used by the benchmark)."""
    from webhook.worker import QuietAccessLogger, worker_class

    cert, key = cert_paths(config)
    return {
        "bind": bind,
        "worker_class": worker_class(config.handshake_timeout_seconds, config.read_timeout_seconds),
        "workers": config.workers,
        "threads": config.threads,
        "certfile": cert,
        "keyfile": key,
        "ssl_context": _tls_context,
        # How long an idle kept-alive connection stays open (gunicorn takes whole seconds). The apiserver's webhook
        # client notices a connection the server closed while idle and does not reuse it.
        "keepalive": config.keep_alive_seconds,
        "timeout": 30,
        "graceful_timeout": 25,
        "accesslog": None,
        "logger_class": QuietAccessLogger,
        "child_exit": _child_exit,
        "post_worker_init": _start_ensure_loop(config),
        "logconfig_dict": {
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"console": {"()": "kube.logs.BackgroundJsonHandler"}},
            "root": {"level": config.log_level, "handlers": ["console"]},
            "loggers": {"gunicorn.error": {"level": "INFO", "handlers": ["console"], "propagate": False}},
        },
    }


def serve(config: Config, bind: str | None = None) -> None:
    """Run the webhook until terminated. A metrics folder made here goes with the process that made it (the
    master: a worker leaves ``run`` through the same frames when it exits, and must not take it away)."""
    made = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        made = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="kubenexus-metrics-")
    master = os.getpid()
    try:
        _run(config, bind)
    finally:
        if made and os.getpid() == master:
            shutil.rmtree(made, ignore_errors=True)


def _run(config: Config, bind: str | None) -> None:
    from gunicorn.app.base import BaseApplication

    prepare_certificates(config)

    class WebhookServer(BaseApplication):
        def load_config(self) -> None:
            for name, value in gunicorn_options(config, bind or f"0.0.0.0:{config.port}").items():
                self.cfg.set(name, value)

        def load(self) -> Any:
            return build_app(config)

    WebhookServer().run()
