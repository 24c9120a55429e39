"""Storing: the Secret that holds the certificate material, and the serving pair on the pod's disk.

Secret ``kubenexus-webhook-tls`` (type kubernetes.io/tls), all PEM:

- ``tls.crt``/``tls.key``: the serving certificate, always signed by ``ca.crt``;
- ``ca.crt``/``ca.key``: the CA that signed ``tls.crt``;
- ``ca-bundle.crt``: what the webhook configurations trust (their ``caBundle`` is its base64);
- ``next-ca.crt``/``next-ca.key``: only while a new CA is being introduced.

Every write is conditional (create, or replace with the resourceVersion that was read): a write that
loses a race raises ``Conflict``, and the caller starts again from a fresh read.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import errno
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from certs.issue import Target, load_cert, load_key
from gang.objects import Obj
from kube.client import api_request

log = logging.getLogger("kubenexus.certs")

TLS_CRT, TLS_KEY, CA_CRT, CA_KEY, CA_BUNDLE = "tls.crt", "tls.key", "ca.crt", "ca.key", "ca-bundle.crt"
NEXT_CA_CRT, NEXT_CA_KEY = "next-ca.crt", "next-ca.key"
ANNOTATION_PUBLISHED = "certs.kubenexus.io/ca-bundle-published-at"
ANNOTATION_SWAPPED = "certs.kubenexus.io/serving-cert-swapped-at"
MANAGED_BY = ("app.kubernetes.io/managed-by", "kubenexus")
MAX_ATTEMPTS = 12  # passes of ensure, and writes of one webhook configuration, before giving up on conflicts
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # RFC 3339 with microseconds: whole seconds would end windows early


class EnsureError(RuntimeError):
    """The pass could not complete (API error, foreign Secret, too many conflicts)."""


class Conflict(Exception):
    """A conditional write lost a race: start the pass again from a fresh read."""


def format_time(when: datetime.datetime) -> str:
    return when.astimezone(datetime.UTC).strftime(_TIME_FORMAT)


@dataclass
class Material:
    """The certificate material of one Secret, parsed; ``data`` is what will be written back."""

    data: dict[str, bytes]
    annotations: dict[str, str]

    @classmethod
    def from_secret(cls, secret: Obj) -> Material:
        data = {}
        for name, value in (secret.get("data") or {}).items():
            with contextlib.suppress(ValueError, TypeError):
                data[name] = base64.b64decode(value)
        return cls(data, dict(((secret.get("metadata") or {}).get("annotations")) or {}))

    def copy(self) -> Material:
        return Material(dict(self.data), dict(self.annotations))

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

    def bundle_b64(self) -> str:
        """The ``caBundle`` every webhook entry must carry."""
        return base64.b64encode(self.data[CA_BUNDLE]).decode("ascii")


class Api:
    """Plain-JSON calls through the product's API client, with the outcomes a pass distinguishes."""

    def __init__(self, api_client: Any, timeout: float) -> None:
        self.client, self.timeout = api_client, timeout

    def call(self, method: str, path: str, body: Any = None) -> Obj | None:
        """The object, or None on 404; raises Conflict on 409, EnsureError otherwise."""
        try:
            status, data = api_request(self.client, method, path, self.timeout, body,
                                       "application/json" if body is not None else None)
        except Exception as exc:  # transport: urllib3 and socket errors
            raise EnsureError(f"{method} {path}: {exc}") from exc
        if status == 404 and method == "GET":
            return None
        if status == 409:
            raise Conflict(path)
        if status >= 300:
            raise EnsureError(f"{method} {path}: HTTP {status}: {_message(data)}")
        obj: Obj = json.loads(data)
        return obj


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message") or data[:200])
    except (ValueError, AttributeError):
        return data[:200].decode("utf-8", "replace")


class SecretStore:
    """The target's Secret: read, created or replaced conditionally, never taken from another manager."""

    def __init__(self, api: Api, target: Target) -> None:
        self.api, self.target = api, target
        self._collection = f"/api/v1/namespaces/{target.namespace}/secrets"
        self._path = f"{self._collection}/{target.secret}"

    def read(self) -> Obj | None:
        """The Secret, or None if there is none yet; EnsureError if cert-manager manages it."""
        secret = self.api.call("GET", self._path)
        if secret is not None:
            self._check_ours(secret)
        return secret

    def resource_version(self) -> str | None:
        """The Secret's current resourceVersion (None if it is gone), read afresh."""
        secret = self.api.call("GET", self._path)
        return None if secret is None else str(secret["metadata"]["resourceVersion"])

    def create(self, material: Material) -> Obj:
        return self._written(self.api.call("POST", self._collection, self._body(material, None)))

    def replace(self, material: Material, current: Obj) -> Obj:
        """PUT with ``current``'s resourceVersion: Conflict if the Secret moved on since it was read."""
        return self._written(self.api.call("PUT", self._path, self._body(material, current)))

    @staticmethod
    def _written(secret: Obj | None) -> Obj:
        assert secret is not None  # a write answers with the object or raises
        return secret

    def _body(self, material: Material, current: Obj | None) -> Obj:
        meta = dict((current or {}).get("metadata") or {})
        meta.update(name=self.target.secret, namespace=self.target.namespace, annotations=material.annotations)
        meta["labels"] = {**(meta.get("labels") or {}), MANAGED_BY[0]: MANAGED_BY[1]}
        for server_set in ("managedFields", "creationTimestamp", "uid", "generation"):
            meta.pop(server_set, None)
        return {"apiVersion": "v1", "kind": "Secret", "metadata": meta,
                "type": (current or {}).get("type") or "kubernetes.io/tls",  # immutable once created
                "data": {k: base64.b64encode(v).decode("ascii") for k, v in sorted(material.data.items())}}

    def _check_ours(self, secret: Obj) -> None:
        annotations = (secret.get("metadata") or {}).get("annotations") or {}
        if any(a.startswith("cert-manager.io/") for a in annotations):
            raise EnsureError(f"Secret {self.target.namespace}/{self.target.secret} is managed by cert-manager; set "
                              "certs.mode to external instead of running certs ensure")


# --- files --------------------------------------------------------------------------------------


def write_atomic(path: str, data: bytes, mode: int) -> None:
    """Temp file + ``os.replace`` so readers see the old file or the new one, never half of one."""
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # before writing, so key bytes never sit in a looser-mode file
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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
