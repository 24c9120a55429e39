"""Prometheus metrics of the webhook, correct under several gunicorn workers.

With ``PROMETHEUS_MULTIPROC_DIR`` set (``kubenexus webhook`` sets it before the workers
start, and before this module is imported), every worker writes its samples to that directory
and ``/metrics`` aggregates them.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)

# prometheus_client chooses where samples live when it is first imported, from the environment then. Whatever
# imported it first in this process (another part of the CLI) may have come before the directory was chosen: its
# samples would stay in this process's memory while /metrics reads the (empty) directory. Choose again here,
# before any of the metrics below exists.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and not values.ValueClass._multiprocess:
    values.ValueClass = values.MultiProcessValue()

REQUESTS = Counter("kubenexus_webhook_requests_total", "Admission requests by endpoint and result",
                   ["endpoint", "result"])
LATENCY = Histogram("kubenexus_webhook_request_duration_seconds", "Time to answer an admission request",
                    ["endpoint"], buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5))
DECISIONS = Counter("kubenexus_webhook_pod_decisions_total", "Pod admission decisions", ["action"])
OWNER_READS = Counter("kubenexus_webhook_owner_reads_total", "API reads of owner objects (cache misses)",
                      ["kind", "result"])
# Per worker (a pid label): what its owner cache holds, as measured against ownerCache.maxBytes.
OWNER_CACHE_BYTES = Gauge("kubenexus_webhook_owner_cache_bytes", "Bytes held by the owner cache of each worker",
                          multiprocess_mode="liveall")
OWNER_CACHE_ENTRIES = Gauge("kubenexus_webhook_owner_cache_entries", "Objects in the owner cache of each worker",
                            multiprocess_mode="liveall")
CLIENT_TIMEOUTS = Counter("kubenexus_webhook_client_timeouts_total",
                          "Connections closed for not finishing their TLS handshake or request in time", ["stage"])
# 0 when any live worker's last GET /version failed: owner reads fail too, pods are gated as unresolved.
APISERVER_REACHABLE = Gauge("kubenexus_webhook_apiserver_reachable",
                            "1 when every worker's last check reached the apiserver", multiprocess_mode="livemin")

# The soonest expiry among live workers (they serve the same files; one may not have reloaded yet).
CERT_EXPIRY = Gauge("kubenexus_webhook_certificate_expiry_timestamp_seconds",
                    "When the serving certificate this webhook presents expires (Unix time)",
                    multiprocess_mode="livemin")


def exposition() -> tuple[bytes, str]:
    """The metrics text, aggregated over all workers when running multi-process."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def record_read(kind: str, result: str) -> None:
    OWNER_READS.labels(kind, result).inc()


def record_cache_size(entries: int, size: int) -> None:
    OWNER_CACHE_ENTRIES.set(entries)
    OWNER_CACHE_BYTES.set(size)
