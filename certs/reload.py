"""A server-side SSLContext that follows ``tls.crt``/``tls.key`` on disk, without a restart.

Whoever renews the certificate (``certs ensure`` in the webhook, the kubelet updating a mounted
Secret, cert-manager) replaces the files; the next TLS handshake sees the change (one ``stat`` of
each file per handshake) and gets a context with the new pair. Connections already open keep the
certificate they were set up with. A pair that does not match (written one file at a time, caught
in between) or does not parse is never loaded: the previous context keeps serving until the files
are consistent again.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

log = logging.getLogger("kubenexus.certs")

Signature = tuple[tuple[int, int, int, int], ...]


class CertificateUnavailable(ssl.SSLError):
    """No valid certificate pair has been loaded yet."""


def _public(data: bytes, loader: Callable[[bytes], x509.Certificate | PrivateKeyTypes]) -> bytes:
    return loader(data).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def pair_problem(cert: bytes, key: bytes) -> str | None:
    """Why ``cert``/``key`` (PEM) cannot serve together, or None."""
    try:
        cert_public = _public(cert, x509.load_pem_x509_certificate)
        key_public = _public(key, lambda d: serialization.load_pem_private_key(d, password=None))
    except (ValueError, TypeError) as exc:
        return f"does not parse: {exc}"
    return None if cert_public == key_public else "tls.crt and tls.key do not match"


class ReloadingContext:
    """``context()``: the SSLContext for the files as they are now (thread-safe, cheap when unchanged)."""

    def __init__(self, cert_path: str, key_path: str,
                 configure: Callable[[ssl.SSLContext], None] | None = None) -> None:
        self.cert_path, self.key_path = cert_path, key_path
        self._configure = configure
        self._lock = threading.Lock()
        self._signature: Signature | None = None  # of the files last looked at
        self._loaded: tuple[bytes, bytes] | None = None  # the PEM the context holds
        self._context: ssl.SSLContext | None = None
        self.error = "not loaded yet"
        self.reloads = 0
        self.not_after: float | None = None  # expiry (epoch seconds) of the certificate being served

    def _stat(self) -> Signature | None:
        try:  # stat follows the kubelet's ..data symlinks: a swapped Secret volume shows as a new inode
            stats = [os.stat(p) for p in (self.cert_path, self.key_path)]
        except OSError:
            return None
        return tuple((s.st_ino, s.st_mtime_ns, s.st_size, s.st_dev) for s in stats)

    def _read(self) -> tuple[bytes, bytes]:
        with open(self.cert_path, "rb") as cert, open(self.key_path, "rb") as key:
            return cert.read(), key.read()

    def _reload(self) -> None:
        try:
            pem = self._read()
        except OSError as exc:
            self.error = f"cannot read the certificate files: {exc}"
            return
        if pem == self._loaded:
            return
        problem = pair_problem(*pem)
        if problem is not None:
            # Usually a renewal caught between its two file writes: the next change completes it.
            self.error = problem
            log.debug("serving certificate not (re)loaded: %s", problem)
            return
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self._configure is not None:
            self._configure(context)
        try:
            context.load_cert_chain(self.cert_path, self.key_path)
            if self._read() != pem:  # replaced while OpenSSL read them: what it loaded is unknown
                self.error = "certificate files changed while loading"
                self._signature = None  # look again on the next handshake
                return
        except (OSError, ssl.SSLError) as exc:
            self.error = f"does not load: {exc}"
            return
        first = self._context is None
        self._context, self._loaded, self.error = context, pem, ""
        self.not_after = x509.load_pem_x509_certificate(pem[0]).not_valid_after_utc.timestamp()
        self.reloads += 1
        if not first:
            log.info("serving certificate reloaded from %s", self.cert_path)

    def context(self) -> ssl.SSLContext:
        signature = self._stat()
        with self._lock:
            if signature != self._signature or self._context is None:
                self._signature = signature
                if signature is not None:
                    self._reload()
            if self._context is None:
                raise CertificateUnavailable(f"serving certificate unavailable: {self.error}")
            return self._context


_reloaders: dict[tuple[str, str], ReloadingContext] = {}
_reloaders_lock = threading.Lock()


def reloading_context(cert_path: str, key_path: str) -> ReloadingContext:
    """The process-wide ReloadingContext of this pair (one per gunicorn worker)."""
    with _reloaders_lock:
        key = (cert_path, key_path)
        if key not in _reloaders:
            _reloaders[key] = ReloadingContext(cert_path, key_path)
        return _reloaders[key]
