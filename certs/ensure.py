"""``kubenexus certs ensure``: the self-managed CA and serving certificate, kept in one Secret.

One pass reads the Secret, decides what the certificate material should be at ``now``, writes the
Secret if that differs, then makes every webhook entry of both webhook configurations carry the
Secret's CA bundle. Several replicas may run it at once: every write is conditional (create, or
replace with the resourceVersion that was read), and a 409 restarts the pass from a fresh read, so
concurrent runs converge on one Secret and one bundle.

Secret ``kubenexus-webhook-tls`` (type kubernetes.io/tls), all PEM:

- ``tls.crt``/``tls.key``: the serving certificate, always signed by ``ca.crt``;
- ``ca.crt``/``ca.key``: the CA that signed ``tls.crt``;
- ``ca-bundle.crt``: what the webhook configurations trust (their ``caBundle`` is its base64);
- ``next-ca.crt``/``next-ca.key``: only while a new CA is being introduced.

CA rotation, so that no request in flight ever meets a certificate its client does not trust
(``overlap`` = ``certs.overlapHours``):

1. the CA is within ``renewBefore`` of expiry: a new CA is generated into ``next-ca.*`` and the bundle
   becomes current + new; both configurations are patched. ``ANNOTATION_PUBLISHED`` records when;
2. ``overlap`` after the bundle was published (and both configurations confirmed to carry it), the
   serving certificate is re-issued by the new CA, which becomes ``ca.crt``; the old CA stays in the
   bundle. ``ANNOTATION_SWAPPED`` records when;
3. ``overlap`` after the swap (every replica has reloaded the new certificate by then), the old CA
   leaves the bundle.

A serving certificate near its expiry under a healthy CA is simply re-issued by that CA (the bundle
does not change). Any configuration whose caBundle differs from the Secret's bundle is rewritten,
and since its clients did not trust the bundle until then, the published time restarts.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import datetime
import errno
import fcntl
import hashlib
import ipaddress
import json
import logging
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from certs.generate import (
    CLOCK_SKEW,
    DNS1123_LABEL,
    is_dns_name,
    is_ip,
    key_pem,
    new_ca,
    new_serving_cert,
    serving_common_name,
    serving_dns_names,
    write_atomic,
)

log = logging.getLogger("kubenexus.certs")

TLS_CRT, TLS_KEY, CA_CRT, CA_KEY, CA_BUNDLE = "tls.crt", "tls.key", "ca.crt", "ca.key", "ca-bundle.crt"
NEXT_CA_CRT, NEXT_CA_KEY = "next-ca.crt", "next-ca.key"
ANNOTATION_PUBLISHED = "certs.kubenexus.io/ca-bundle-published-at"
ANNOTATION_SWAPPED = "certs.kubenexus.io/serving-cert-swapped-at"
MANAGED_BY = ("app.kubernetes.io/managed-by", "kubenexus")
CA_COMMON_NAME_PREFIX = "kubenexus-webhook-ca"
_CONFIG_PATHS = {
    "mutating": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "validating": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}
_MAX_PASSES = 12
PHASE_STEADY = "steady"  # the bundle is ca.crt alone
PHASE_NEW_CA = "new CA published"  # bundle = ca.crt + next-ca.crt; tls.crt still from ca.crt
PHASE_OLD_CA = "old CA retiring"  # bundle = ca.crt (new) + the previous CA; tls.crt from the new CA


class EnsureError(RuntimeError):
    """The pass could not complete (API error, foreign Secret, too many conflicts)."""


class _Conflict(Exception):
    """A conditional write lost a race: start the pass again from a fresh read."""


@dataclass(frozen=True)
class Target:
    """Where the certificate lives and whom it is for."""

    namespace: str = "kubenexus-system"
    service: str = "kubenexus-webhook"
    secret: str = "kubenexus-webhook-tls"
    webhook_configuration: str = "kubenexus-gang-admission"
    extra_sans: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for arg in ("namespace", "service", "secret", "webhook_configuration"):
            value = getattr(self, arg)
            if not isinstance(value, str) or not DNS1123_LABEL.match(value):
                raise ValueError(f"{arg}: {value!r} is not a DNS-1123 label (lowercase a-z0-9 and '-', max 63)")
        for san in self.extra_sans:
            if not is_ip(san) and not is_dns_name(san):
                raise ValueError(f"extra SAN {san!r} is neither a DNS name nor an IP address")

    def dns_names(self) -> list[str]:
        extra = [s for s in self.extra_sans if not is_ip(s)]
        return list(dict.fromkeys([*serving_dns_names(self.service, self.namespace), *extra]))

    def ips(self) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address(s) for s in self.extra_sans if is_ip(s)]


@dataclass(frozen=True)
class Policy:
    validity: datetime.timedelta = datetime.timedelta(days=365)
    ca_validity: datetime.timedelta = datetime.timedelta(days=3650)
    renew_before: datetime.timedelta = datetime.timedelta(days=30)
    overlap: datetime.timedelta = datetime.timedelta(hours=1)

    def __post_init__(self) -> None:
        if not datetime.timedelta(0) < self.renew_before < self.validity <= self.ca_validity:
            raise ValueError("expected 0 < renewBefore < validity <= caValidity")
        if not datetime.timedelta(0) < 2 * self.overlap < self.renew_before:
            raise ValueError("expected 0 < 2 x overlap < renewBefore")


def from_config(config: Any) -> tuple[Target, Policy]:
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
    patched: list[str] = field(default_factory=list)  # webhook configurations whose caBundle was rewritten
    missing: list[str] = field(default_factory=list)  # webhook configurations that do not exist (never created)
    phase: str = ""
    secret_written: bool = False  # created or replaced (also for annotation-only changes)
    files_written: bool = False
    passes: int = 0
    secret: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.actions or self.patched or self.secret_written or self.files_written)


# --- certificate material ---------------------------------------------------------------------


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def load_cert(data: bytes | None) -> x509.Certificate | None:
    if not data:
        return None
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        return None


def load_key(data: bytes | None) -> ec.EllipticCurvePrivateKey | None:
    if not data:
        return None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        return None
    return key if isinstance(key, ec.EllipticCurvePrivateKey) else None


def load_bundle(data: bytes | None) -> list[x509.Certificate]:
    if not data:
        return []
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        return []


def _same_key(cert: x509.Certificate, key: Any) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key is not None and cert.public_key().public_bytes(*fmt) == key.public_key().public_bytes(*fmt)


def _valid_at(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return cert.not_valid_before_utc <= now < cert.not_valid_after_utc


def _usable_ca(cert: x509.Certificate | None, key: Any, now: datetime.datetime) -> bool:
    if cert is None or not _same_key(cert, key) or not _valid_at(cert, now):
        return False
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def serving_problem(cert: x509.Certificate | None, key: Any, ca: x509.Certificate, target: Target,
                     now: datetime.datetime) -> str | None:
    """Why the serving certificate cannot be used as it is, or None."""
    if cert is None or key is None:
        return "missing"
    if not _same_key(cert, key):
        return "key does not match"
    if not signed_by(cert, ca):
        return "not signed by ca.crt"
    if not _valid_at(cert, now):
        return "expired" if now >= cert.not_valid_after_utc else "not yet valid"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no subjectAltName"
    if not set(target.dns_names()) <= set(sans.get_values_for_type(x509.DNSName)) or \
            not set(target.ips()) <= set(sans.get_values_for_type(x509.IPAddress)):
        return "names do not match the Service"
    return None


@dataclass
class _Material:
    """The certificate material of one Secret, parsed; ``data`` is what will be written back."""

    data: dict[str, bytes]
    annotations: dict[str, str]

    @classmethod
    def from_secret(cls, secret: dict[str, Any]) -> _Material:
        data = {}
        for name, value in (secret.get("data") or {}).items():
            with contextlib.suppress(ValueError, TypeError):
                data[name] = base64.b64decode(value)
        return cls(data, dict(((secret.get("metadata") or {}).get("annotations")) or {}))

    def cert(self, name: str) -> x509.Certificate | None:
        return load_cert(self.data.get(name))

    def key(self, name: str) -> ec.EllipticCurvePrivateKey | None:
        return load_key(self.data.get(name))

    def stamp(self, annotation: str, now: datetime.datetime) -> None:
        self.annotations[annotation] = format_time(now)

    def since(self, annotation: str, now: datetime.datetime) -> datetime.timedelta:
        """How long ago the annotation's time was; zero (just now) if it is missing or unreadable."""
        try:
            stamped = datetime.datetime.strptime(self.annotations[annotation], _TIME_FORMAT)
        except (KeyError, ValueError):
            return datetime.timedelta(0)
        return now - stamped.replace(tzinfo=datetime.UTC)


_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # RFC 3339 with microseconds: whole seconds would end windows early


def format_time(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime(_TIME_FORMAT)


def _issue(target: Target, policy: Policy, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
           now: datetime.datetime) -> tuple[bytes, bytes]:
    """A serving certificate from ``ca``, never outliving it."""
    not_after = min(now + policy.validity, ca.not_valid_after_utc)
    cert, key = new_serving_cert(ca, ca_key, serving_common_name(target.service, target.namespace),
                                 target.dns_names(), target.ips(), now - CLOCK_SKEW, not_after)
    return _pem(cert), key_pem(key)


def _new_ca(policy: Policy, now: datetime.datetime) -> tuple[bytes, bytes]:
    # A distinct subject per CA (as kube's self-signed certificates do): verifiers never confuse old and new.
    cert, key = new_ca(f"{CA_COMMON_NAME_PREFIX}@{int(now.timestamp())}", now - CLOCK_SKEW, now + policy.ca_validity)
    return _pem(cert), key_pem(key)


def plan(material: _Material, target: Target, policy: Policy, now: datetime.datetime) -> tuple[list[str], str]:
    """Bring ``material`` to what it should be at ``now`` (in place); returns (actions, phase)."""
    data, actions = material.data, []
    ca, ca_key = material.cert(CA_CRT), material.key(CA_KEY)
    nxt, nxt_key = material.cert(NEXT_CA_CRT), material.key(NEXT_CA_KEY)
    bundle = load_bundle(data.get(CA_BUNDLE))

    def swap_to_next(reason: str) -> None:
        assert nxt is not None and nxt_key is not None
        data[CA_CRT], data[CA_KEY] = data.pop(NEXT_CA_CRT), data.pop(NEXT_CA_KEY)
        data[TLS_CRT], data[TLS_KEY] = _issue(target, policy, nxt, nxt_key, now)
        material.stamp(ANNOTATION_SWAPPED, now)
        actions.append(reason)

    if not _usable_ca(ca, ca_key, now):
        if _usable_ca(nxt, nxt_key, now):  # the new CA is already (being) trusted: better than a fresh one
            swap_to_next("serving certificate re-issued by the new CA early: the current CA is unusable")
        else:
            for name in (NEXT_CA_CRT, NEXT_CA_KEY):
                data.pop(name, None)
            data[CA_CRT], data[CA_KEY] = _new_ca(policy, now)
            new_ca_cert, new_ca_key = load_cert(data[CA_CRT]), load_key(data[CA_KEY])
            assert new_ca_cert is not None and new_ca_key is not None
            data[TLS_CRT], data[TLS_KEY] = _issue(target, policy, new_ca_cert, new_ca_key, now)
            bundle = []  # nothing to overlap with: whatever was trusted before cannot verify this CA
            material.annotations.pop(ANNOTATION_SWAPPED, None)
            actions.append("CA created" if ca is None else "CA replaced (the current one was unusable)")
    elif NEXT_CA_CRT in data or NEXT_CA_KEY in data:
        if not _usable_ca(nxt, nxt_key, now):
            data.pop(NEXT_CA_CRT, None)
            data.pop(NEXT_CA_KEY, None)
            actions.append("unusable next CA discarded")
        elif material.since(ANNOTATION_PUBLISHED, now) >= policy.overlap:
            swap_to_next("serving certificate re-issued by the new CA (new CA trusted for the overlap window)")
    else:
        previous = [c for c in bundle if c != ca]
        if previous:
            if ANNOTATION_SWAPPED not in material.annotations:
                material.stamp(ANNOTATION_SWAPPED, now)
            if material.since(ANNOTATION_SWAPPED, now) >= policy.overlap:
                bundle = []
                material.annotations.pop(ANNOTATION_SWAPPED, None)
                actions.append("old CA removed from the bundle (serving certificate swapped for the overlap window)")
        elif ca is not None and ca.not_valid_after_utc - policy.renew_before <= now:
            data[NEXT_CA_CRT], data[NEXT_CA_KEY] = _new_ca(policy, now)
            actions.append("new CA added to the bundle (current CA near expiry)")

    # The serving certificate, under whatever ca.crt is now.
    ca, ca_key = material.cert(CA_CRT), material.key(CA_KEY)
    assert ca is not None and ca_key is not None
    rotating = NEXT_CA_CRT in data
    problem = serving_problem(material.cert(TLS_CRT), material.key(TLS_KEY), ca, target, now)
    cert = material.cert(TLS_CRT)
    if problem is None and not rotating and cert is not None and cert.not_valid_after_utc - policy.renew_before <= now:
        problem = "near expiry"  # while a new CA is coming, the swap re-issues it within the overlap window
    if problem is not None:
        data[TLS_CRT], data[TLS_KEY] = _issue(target, policy, ca, ca_key, now)
        actions.append(f"serving certificate re-issued ({problem})")

    # The bundle: ca.crt, then the next CA or the previous ones still in their overlap window.
    nxt = material.cert(NEXT_CA_CRT)
    wanted = {c.fingerprint(hashes.SHA256()): c
              for c in [ca, *([nxt] if nxt else [c for c in bundle if now < c.not_valid_after_utc])]}
    old = {c.fingerprint(hashes.SHA256()) for c in load_bundle(data.get(CA_BUNDLE))}
    if set(wanted) != old:  # the same CAs in another order are the same bundle: no needless rewrite
        data[CA_BUNDLE] = b"".join(_pem(c) for c in wanted.values())
        material.stamp(ANNOTATION_PUBLISHED, now)
    if ANNOTATION_PUBLISHED not in material.annotations:
        material.stamp(ANNOTATION_PUBLISHED, now)
    if len(wanted) == 1:
        material.annotations.pop(ANNOTATION_SWAPPED, None)
    return actions, PHASE_NEW_CA if rotating else (PHASE_OLD_CA if len(wanted) > 1 else PHASE_STEADY)


# --- the API ------------------------------------------------------------------------------------


class _Api:
    def __init__(self, api_client: Any, timeout: float) -> None:
        self.client, self.timeout = api_client, timeout

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any] | None:
        """The object, or None on 404; raises _Conflict on 409, EnsureError otherwise."""
        from kube.client import api_request

        try:
            status, data = api_request(self.client, method, path, self.timeout, body,
                                       "application/json" if body is not None else None)
        except Exception as exc:  # transport: urllib3 and socket errors
            raise EnsureError(f"{method} {path}: {exc}") from exc
        if status == 404 and method == "GET":
            return None
        if status == 409:
            raise _Conflict(path)
        if status >= 300:
            raise EnsureError(f"{method} {path}: HTTP {status}: {_message(data)}")
        return json.loads(data)

    def secret_path(self, target: Target, name: bool = True) -> str:
        base = f"/api/v1/namespaces/{target.namespace}/secrets"
        return f"{base}/{target.secret}" if name else base


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message") or data[:200])
    except (ValueError, AttributeError):
        return data[:200].decode("utf-8", "replace")


def _secret_body(target: Target, material: _Material, current: dict[str, Any] | None) -> dict[str, Any]:
    meta = dict((current or {}).get("metadata") or {})
    meta.update(name=target.secret, namespace=target.namespace, annotations=material.annotations)
    meta["labels"] = {**(meta.get("labels") or {}), MANAGED_BY[0]: MANAGED_BY[1]}
    for server_set in ("managedFields", "creationTimestamp", "uid", "generation"):
        meta.pop(server_set, None)
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta,
            "type": (current or {}).get("type") or "kubernetes.io/tls",  # immutable once created
            "data": {k: base64.b64encode(v).decode("ascii") for k, v in sorted(material.data.items())}}


def _check_ours(secret: dict[str, Any], target: Target) -> None:
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    if any(a.startswith("cert-manager.io/") for a in annotations):
        raise EnsureError(f"Secret {target.namespace}/{target.secret} is managed by cert-manager; set certs.mode "
                          "to external instead of running certs ensure")


def _sync_configs(api: _Api, target: Target, bundle_b64: str, secret_rv: str, result: Result) -> bool:
    """Every webhook entry of both configurations carries ``bundle_b64``; True if one had to be rewritten.

    Before each write the Secret is read again: if it moved on, the pass restarts (_Conflict), so a
    replica with a stale view never overwrites a newer bundle for longer than the next write takes.
    """
    repaired = False
    for kind, base in _CONFIG_PATHS.items():
        path = f"{base}/{target.webhook_configuration}"
        for _ in range(_MAX_PASSES):
            config = api.call("GET", path)
            if config is None:
                if kind not in result.missing:
                    result.missing.append(kind)
                break
            hooks = config.get("webhooks") or []
            if all((h.get("clientConfig") or {}).get("caBundle") == bundle_b64 for h in hooks):
                break
            fresh = api.call("GET", api.secret_path(target))
            if fresh is None or fresh["metadata"]["resourceVersion"] != secret_rv:
                raise _Conflict("secret changed")
            for hook in hooks:
                hook.setdefault("clientConfig", {})["caBundle"] = bundle_b64
            try:
                api.call("PUT", path, config)  # metadata.resourceVersion from the GET: conditional
            except _Conflict:
                continue
            repaired = True
            result.patched.append(kind)
            break
        else:
            raise EnsureError(f"{kind} webhook configuration {target.webhook_configuration}: too many conflicts")
    return repaired


def ensure(api_client: Any, target: Target, policy: Policy, *, now: datetime.datetime | None = None,
           cert_dir: str | None = None, timeout: float = 5.0) -> Result:
    """One pass (see the module docstring); ``now`` is injectable for tests."""
    now = now or datetime.datetime.now(datetime.UTC)
    api, result = _Api(api_client, timeout), Result()
    repaired: set[str] = set()  # bundles this call had to put into configurations, across restarted passes
    written: list[str] = []  # actions of passes whose Secret write landed: a restarted pass does not undo them
    for attempt in range(_MAX_PASSES):
        result.passes = attempt + 1
        result.actions, result.patched, result.missing = list(written), [], []
        if attempt:
            time.sleep(random.uniform(0.005, 0.05) * attempt)  # de-synchronise replicas that keep colliding
        try:
            secret = api.call("GET", api.secret_path(target))
            if secret is not None:
                _check_ours(secret, target)
            material = _Material.from_secret(secret or {})
            before = (dict(material.data), dict(material.annotations))
            actions, result.phase = plan(material, target, policy, now)
            if secret is None:
                secret = api.call("POST", api.secret_path(target, name=False), _secret_body(target, material, None))
                actions.insert(0, "Secret created")
                result.secret_written = True
            elif (material.data, material.annotations) != before:
                secret = api.call("PUT", api.secret_path(target), _secret_body(target, material, secret))
                result.secret_written = True
            written.extend(actions)
            result.actions = list(written)
            assert secret is not None
            bundle_b64 = base64.b64encode(material.data[CA_BUNDLE]).decode("ascii")
            if _sync_configs(api, target, bundle_b64, secret["metadata"]["resourceVersion"], result):
                repaired.add(bundle_b64)
            if bundle_b64 in repaired and material.since(ANNOTATION_PUBLISHED, now) > datetime.timedelta(0):
                # Clients trusted something else until just now: the overlap window starts again.
                material.stamp(ANNOTATION_PUBLISHED, now)
                secret = api.call("PUT", api.secret_path(target), _secret_body(target, material, secret))
                result.secret_written = True
                assert secret is not None
        except _Conflict:
            continue
        result.secret = secret
        if cert_dir:
            result.files_written = write_cert_dir(cert_dir, material.data[TLS_CRT], material.data[TLS_KEY])
        return result
    raise EnsureError(f"gave up after {_MAX_PASSES} conflicting passes")


def write_cert_dir(cert_dir: str, cert: bytes, key: bytes) -> bool:
    """Write tls.key then tls.crt where they differ; False if nothing changed.

    A read-only directory (the Secret itself mounted by the kubelet) is left to the kubelet.
    """
    paths = {name: os.path.join(cert_dir, name) for name in (TLS_CRT, TLS_KEY)}
    wanted = {TLS_KEY: key, TLS_CRT: cert}
    changed = False
    for name in (TLS_KEY, TLS_CRT):
        try:
            with open(paths[name], "rb") as handle:
                if handle.read() == wanted[name]:
                    continue
        except OSError:
            pass
        try:
            os.makedirs(cert_dir, exist_ok=True)
            write_atomic(paths[name], wanted[name], 0o600 if name == TLS_KEY else 0o644)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                log.debug("certificate directory %s is not writable (%s): the kubelet delivers the files", cert_dir,
                          exc.strerror)
                return False
            raise
        changed = True
    return changed


# --- in the webhook -----------------------------------------------------------------------------


@contextlib.contextmanager
def _pod_lock(cert_dir: str) -> Any:
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


def ensure_for_webhook(config: Any, api_client: Any, now: datetime.datetime | None = None) -> Result:
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

    def __init__(self, config: Any, client_factory: Callable[[], Any]) -> None:
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


def add_parser(subparsers: argparse._SubParsersAction) -> None:
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
    from gang.config import config_or_exit
    from kube.client import new_api_client

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
    try:
        client = new_api_client(args.kubeconfig or config.kubeconfig, pool_size=2, retries=3)
        result = ensure(client, target, policy, cert_dir=args.cert_dir, timeout=max(config.api_timeout_seconds, 5.0))
    except Exception as exc:  # noqa: BLE001 (a CLI reports any failure in one line)
        print(f"kubenexus certs ensure: {exc}", file=sys.stderr)
        return 1
    for action in result.actions or ["Secret up to date"]:
        print(f"{target.namespace}/{target.secret}: {action}")
    for kind in ("mutating", "validating"):
        state = "not found (not patched)" if kind in result.missing else \
            ("caBundle rewritten" if kind in result.patched else "caBundle up to date")
        print(f"{kind} webhook configuration {target.webhook_configuration}: {state}")
    if args.cert_dir:
        print(f"{args.cert_dir}: {'tls.crt/tls.key written' if result.files_written else 'up to date'}")
    print(f"phase: {result.phase}")
    return 0
