"""Self-signed CA and serving certificate for the admission webhook.

The apiserver only calls webhooks over TLS, verifying the serving certificate against the
``caBundle`` in the webhook configuration. This module mints both so a cluster without
cert-manager can still run the webhook.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import ipaddress
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_COMMON_NAME = "kubenexus-webhook-ca"
CLOCK_SKEW = datetime.timedelta(minutes=5)  # notBefore is backdated by this much
_MAX_CN = 64  # X.520 upper bound; cryptography rejects longer common names.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class GeneratedCerts:
    """Paths of the files written by :func:`generate`."""

    ca_cert: str
    ca_key: str
    cert: str
    key: str

    def ca_bundle_b64(self) -> str:
        """Base64 of the CA PEM, the form a webhook configuration's ``caBundle`` takes."""
        with open(self.ca_cert, "rb") as f:
            return base64.b64encode(f.read()).decode("ascii")


def serving_dns_names(service: str, namespace: str) -> list[str]:
    """Every name a client may use for the Service, so hostname checks pass however it is addressed."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def generate(
    service: str,
    namespace: str,
    out_dir: str,
    *,
    extra_dns: Sequence[str] = (),
    extra_ips: Sequence[str] = (),
    days: int = 365,
) -> GeneratedCerts:
    """Write ``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` (PEM) into ``out_dir``.

    Inputs are validated before anything touches the disk. The serving CN is
    ``svc.ns.svc``; if that exceeds 64 characters the CN falls back to the service name
    (verifiers use the SANs, which always carry the full names).
    """
    ips = validate_names(service, namespace, extra_dns, extra_ips, days)
    dns_names = list(dict.fromkeys([*serving_dns_names(service, namespace), *extra_dns]))
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - CLOCK_SKEW, now + datetime.timedelta(days=days)
    ca_cert, ca_key = new_ca(CA_COMMON_NAME, not_before, not_after)
    cert, key = new_serving_cert(ca_cert, ca_key, serving_common_name(service, namespace), dns_names, ips,
                                 not_before, not_after)

    if not os.path.isdir(out_dir):
        os.makedirs(out_dir, mode=0o700)
        os.chmod(out_dir, 0o700)  # makedirs' mode is filtered by the umask
    paths = GeneratedCerts(*(os.path.join(out_dir, n) for n in ("ca.crt", "ca.key", "tls.crt", "tls.key")))
    # Keys first: a watcher reloading on tls.crt then finds the matching tls.key already in place.
    write_atomic(paths.ca_key, key_pem(ca_key), 0o600)
    write_atomic(paths.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    write_atomic(paths.key, key_pem(key), 0o600)
    write_atomic(paths.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return paths


def serving_common_name(service: str, namespace: str) -> str:
    """``svc.ns.svc``, or the bare service name when that exceeds 64 characters (verifiers use the SANs)."""
    cn = f"{service}.{namespace}.svc"
    return cn if len(cn) <= _MAX_CN else service


def new_ca(
    common_name: str, not_before: datetime.datetime, not_after: datetime.datetime
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed P-256 CA that may only sign leaf certificates (path length 0)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key(), not_before, not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_cert, ca_key


def new_serving_cert(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    dns_names: Sequence[str],
    ips: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address],
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A P-256 TLS server certificate for ``dns_names`` and ``ips``, signed by ``ca_cert``/``ca_key``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ip) for ip in ips]
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        _builder(subject, ca_cert.subject, key.public_key(), not_before, not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def validate_names(
    service: str, namespace: str, extra_dns: Sequence[str], extra_ips: Sequence[str], days: int
) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Reject bad input with a message naming the argument; returns the parsed IPs."""
    for arg, value in (("service", service), ("namespace", namespace)):
        if not isinstance(value, str) or not DNS1123_LABEL.match(value):
            raise ValueError(f"{arg}: {value!r} is not a DNS-1123 label (lowercase a-z0-9 and '-', max 63)")
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"days: must be an integer >= 1, got {days!r}")
    for arg, seq in (("extra_dns", extra_dns), ("extra_ips", extra_ips)):
        if isinstance(seq, str | bytes):  # a lone string would silently iterate per character
            raise ValueError(f"{arg}: expected a sequence of strings, got the string {seq!r}")
    for name in extra_dns:
        if not is_dns_name(name):
            raise ValueError(f"extra_dns: {name!r} is not a valid DNS name")
    ips = []
    for addr in extra_ips:
        try:
            ips.append(ipaddress.ip_address(addr))
        except ValueError:
            raise ValueError(f"extra_ips: {addr!r} is not a valid IP address") from None
    return ips


def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def is_dns_name(name: object) -> bool:
    """A hostname, optionally with a leading ``*.`` wildcard label."""
    if not isinstance(name, str) or not name or len(name) > 253:
        return False
    labels = name.split(".")
    if labels[0] == "*" and len(labels) > 1:
        labels = labels[1:]
    return all(_DNS_LABEL.match(label) for label in labels)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    not_before: datetime.datetime,
    not_after: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    """CA keys only sign certificates/CRLs; the serving key only signs TLS handshakes."""
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


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


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``generate`` on the ``kubenexus certs`` subparsers."""
    p = subparsers.add_parser("generate", help="generate a self-signed CA and webhook serving certificate")
    p.add_argument("--service", required=True, help="webhook Service name")
    p.add_argument("--namespace", required=True, help="namespace of the Service")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory for the PEM files")
    p.add_argument("--dns", action="append", default=[], metavar="NAME", help="extra DNS SAN (repeatable)")
    p.add_argument("--ip", action="append", default=[], metavar="ADDR", help="extra IP SAN (repeatable)")
    p.add_argument("--days", type=int, default=365, help="validity in days (default: 365)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    """CLI handler: 0 on success, 2 on invalid arguments, 1 if the files cannot be written."""
    try:
        result = generate(
            args.service,
            args.namespace,
            args.out,
            extra_dns=args.dns,
            extra_ips=args.ip,
            days=args.days,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"ca.crt: {result.ca_cert}")
    print(f"ca.key: {result.ca_key}")
    print(f"tls.crt: {result.cert}")
    print(f"tls.key: {result.key}")
    print(f"caBundle: {result.ca_bundle_b64()}")
    return 0
