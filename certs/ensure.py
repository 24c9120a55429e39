"""``kubenexus certs ensure``: the self-managed CA and serving certificate, kept in one Secret.

One pass reads the Secret (``certs.store``), decides what the certificate material should be at
``now`` (the rotation step and the bundle: ``certs.publish``; the serving certificate:
``certs.issue``), writes the Secret if that differs, then makes every webhook entry of both webhook
configurations carry the Secret's CA bundle. Several replicas may run it at once: every write is
conditional, and a conflict restarts the pass from a fresh read, so concurrent runs converge on one
Secret and one bundle.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import fcntl
import hashlib
import logging
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from certs.issue import Policy, Target, issue_serving, serving_renewal
from certs.publish import Phase, WebhookKind, publish, rotate, update_bundle
from certs.store import (
    ANNOTATION_PUBLISHED,
    CA_CRT,
    CA_KEY,
    MAX_ATTEMPTS,
    NEXT_CA_CRT,
    TLS_CRT,
    TLS_KEY,
    Api,
    Conflict,
    EnsureError,
    Material,
    SecretStore,
    write_cert_dir,
)
from gang.config import Config, config_or_exit
from kube.client import new_api_client

log = logging.getLogger("kubenexus.certs")


def from_config(config: Config) -> tuple[Target, Policy]:
    """The Target and Policy a ``gang.config.Config`` describes."""
    target = Target(config.namespace, config.certs_service, config.certs_secret, config.certs_webhook_configuration,
                    tuple(config.certs_extra_sans))
    policy = Policy(datetime.timedelta(days=config.certs_validity_days),
                    datetime.timedelta(days=config.certs_ca_validity_days),
                    datetime.timedelta(days=config.certs_renew_before_days),
                    datetime.timedelta(hours=config.certs_overlap_hours))
    return target, policy


@dataclass
class Result:
    actions: list[str] = field(default_factory=list)  # what changed in the Secret, in words
    patched: list[WebhookKind] = field(default_factory=list)  # configurations whose caBundle was rewritten
    missing: list[WebhookKind] = field(default_factory=list)  # configurations that do not exist (never created)
    phase: Phase = Phase.STEADY
    secret_written: bool = False  # created or replaced (also for annotation-only changes)
    files_written: bool = False
    passes: int = 0
    secret: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.actions or self.patched or self.secret_written or self.files_written)


def plan(material: Material, target: Target, policy: Policy, now: datetime.datetime) -> tuple[list[str], Phase]:
    """Bring ``material`` to what it should be at ``now`` (in place); returns (actions, phase)."""
    step = rotate(material, target, policy, now)
    actions = [step.action] if step.action else []
    # The serving certificate, under whatever ca.crt is now.
    ca, ca_key = material.cert(CA_CRT), material.key(CA_KEY)
    assert ca is not None and ca_key is not None
    reason = serving_renewal(material.cert(TLS_CRT), material.key(TLS_KEY), ca, target, policy, now,
                             rotating=NEXT_CA_CRT in material.data)
    if reason is not None:
        material.data[TLS_CRT], material.data[TLS_KEY] = issue_serving(target, policy, ca, ca_key, now)
        actions.append(f"serving certificate re-issued ({reason})")
    return actions, update_bundle(material, step, now)


def ensure(api_client: Any, target: Target, policy: Policy, *, now: datetime.datetime | None = None,
           cert_dir: str | None = None, timeout: float = 5.0) -> Result:
    """One pass (see the module docstring); ``now`` is injectable for tests."""
    now = now or datetime.datetime.now(datetime.UTC)
    api, result = Api(api_client, timeout), Result()
    store = SecretStore(api, target)
    repaired: set[str] = set()  # bundles this call had to put into configurations, across restarted passes
    written: list[str] = []  # actions of passes whose Secret write landed: a restarted pass does not undo them
    for attempt in range(MAX_ATTEMPTS):
        result.passes = attempt + 1
        result.actions, result.patched, result.missing = list(written), [], []
        if attempt:
            time.sleep(random.uniform(0.005, 0.05) * attempt)  # de-synchronise replicas that keep colliding
        try:
            secret = store.read()
            material = Material.from_secret(secret or {})
            before = material.copy()
            actions, result.phase = plan(material, target, policy, now)
            if secret is None:
                secret = store.create(material)
                actions.insert(0, "Secret created")
                result.secret_written = True
            elif material != before:
                secret = store.replace(material, secret)
                result.secret_written = True
            written.extend(actions)
            result.actions = list(written)
            bundle_b64 = material.bundle_b64()
            published = publish(api, store, target.webhook_configuration, bundle_b64,
                                secret["metadata"]["resourceVersion"])
            result.patched, result.missing = published.patched, published.missing
            if published.patched:
                repaired.add(bundle_b64)
            if bundle_b64 in repaired and material.since(ANNOTATION_PUBLISHED, now) > datetime.timedelta(0):
                # Clients trusted something else until just now: the overlap window starts again.
                material.stamp(ANNOTATION_PUBLISHED, now)
                secret = store.replace(material, secret)
                result.secret_written = True
        except Conflict:
            continue
        result.secret = secret
        if cert_dir:
            result.files_written = write_cert_dir(cert_dir, material.data[TLS_CRT], material.data[TLS_KEY])
        return result
    raise EnsureError(f"gave up after {MAX_ATTEMPTS} conflicting passes")


# --- in the webhook -----------------------------------------------------------------------------


@contextlib.contextmanager
def _pod_lock(cert_dir: str) -> Iterator[None]:
    """One ensure at a time per certificate directory (the gunicorn workers of one pod share it)."""
    digest = hashlib.sha256(os.path.abspath(cert_dir).encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"kubenexus-certs-{digest}.lock")
    try:
        handle = open(path, "a")  # noqa: SIM115 (closed below)
    except OSError:
        yield  # no writable temp dir: run unlocked; ensure is safe concurrently anyway
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        handle.close()


def ensure_for_webhook(config: Config, api_client: Any, now: datetime.datetime | None = None) -> Result:
    """One pass as the webhook runs it: the configured names, its certificate directory, one pass per pod."""
    target, policy = from_config(config)
    with _pod_lock(config.cert_dir):
        result = ensure(api_client, target, policy, now=now, cert_dir=config.cert_dir,
                        timeout=max(config.api_timeout_seconds, 5.0))
    _log_result(result)
    return result


def _log_result(result: Result) -> None:
    for action in result.actions:
        log.info("certificates: %s", action, extra={"phase": result.phase})
    for kind in result.patched:
        log.info("certificates: caBundle of the %s webhook configuration rewritten", kind)
    if result.missing:
        log.warning("certificates: webhook configuration(s) %s not found: caBundle not patched",
                    ", ".join(result.missing))


class EnsureLoop(threading.Thread):
    """``ensure`` every ``certs.checkIntervalSeconds`` (±10 %), until ``stop()``; errors are logged and retried."""

    def __init__(self, config: Config, client_factory: Callable[[], Any]) -> None:
        super().__init__(name="kubenexus-certs", daemon=True)
        self._config, self._client_factory = config, client_factory
        self._stopped = threading.Event()

    def run(self) -> None:
        client = None
        while not self._stopped.wait(self._config.certs_check_interval_seconds * random.uniform(0.9, 1.1)):
            try:
                client = client or self._client_factory()
                ensure_for_webhook(self._config, client)
            except Exception as exc:  # never let the loop die: the next round retries
                log.warning("certificates: ensure failed: %s", exc)

    def stop(self) -> None:
        self._stopped.set()


# --- CLI ----------------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``ensure`` on the ``kubenexus certs`` subparsers."""
    p = subparsers.add_parser(
        "ensure", help="create or renew the webhook CA and serving certificate (Secret + caBundles)",
        description="Create or renew the self-managed CA and serving certificate in one Secret and patch the CA "
                    "bundle into both webhook configurations. Safe to run from several replicas at once.")
    p.add_argument("--config", help="configuration file (YAML); KUBENEXUS_* variables override it")
    p.add_argument("--kubeconfig", help="kubeconfig (default: the configured one, in-cluster, ~/.kube)")
    p.add_argument("--namespace", help="namespace of the Service and the Secret (default: namespace)")
    p.add_argument("--service", help="webhook Service name (default: certs.serviceName)")
    p.add_argument("--secret", help="Secret name (default: certs.secretName)")
    p.add_argument("--webhook-configuration", metavar="NAME",
                   help="name of both webhook configurations (default: certs.webhookConfigurationName)")
    p.add_argument("--cert-dir", metavar="DIR", help="also write tls.crt and tls.key here")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    """0 on success, 2 on invalid configuration or arguments, 1 if the pass fails."""
    config = config_or_exit(args.config, "kubenexus certs ensure")
    if config.certs_mode != "self-managed":
        print(f"kubenexus certs ensure: certs.mode is {config.certs_mode}: the certificate is managed elsewhere",
              file=sys.stderr)
        return 2
    try:
        target, policy = from_config(config)
        overrides = {"namespace": args.namespace, "service": args.service, "secret": args.secret,
                     "webhook_configuration": args.webhook_configuration}
        target = dataclasses.replace(target, **{k: v for k, v in overrides.items() if v is not None})
    except ValueError as exc:
        print(f"kubenexus certs ensure: {exc}", file=sys.stderr)
        return 2
    client = new_api_client(args.kubeconfig or config.kubeconfig, pool_size=2, retries=3)  # no kubeconfig: usage (2)
    try:
        result = ensure(client, target, policy, cert_dir=args.cert_dir, timeout=max(config.api_timeout_seconds, 5.0))
    except Exception as exc:  # noqa: BLE001 (a CLI reports any failure in one line)
        print(f"kubenexus certs ensure: {exc}", file=sys.stderr)
        return 1
    for action in result.actions or ["Secret up to date"]:
        print(f"{target.namespace}/{target.secret}: {action}")
    for kind in WebhookKind:
        state = "not found (not patched)" if kind in result.missing else \
            ("caBundle rewritten" if kind in result.patched else "caBundle up to date")
        print(f"{kind} webhook configuration {target.webhook_configuration}: {state}")
    if args.cert_dir:
        print(f"{args.cert_dir}: {'tls.crt/tls.key written' if result.files_written else 'up to date'}")
    print(f"phase: {result.phase}")
    return 0
