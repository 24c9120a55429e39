"""Issuing: CAs and serving certificates, and whether the ones we have can still be used.

Pure crypto on PEM bytes and ``x509`` objects at an explicit ``now``: no Secret, no API, no files.
``kubenexus certs generate`` and ``kubenexus certs ensure`` both mint their material here.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gang.names import DNS1123_LABEL, is_dns_name, is_ip

CLOCK_SKEW = datetime.timedelta(minutes=5)  # notBefore is backdated by this much
CA_COMMON_NAME_PREFIX = "kubenexus-webhook-ca"
_MAX_CN = 64  # X.520 upper bound; cryptography rejects longer common names.

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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
            if not isinstance(value, str) or not DNS1123_LABEL.fullmatch(value):
                raise ValueError(f"{arg}: {value!r} is not a DNS-1123 label (lowercase a-z0-9 and '-', max 63)")
        for san in self.extra_sans:
            if not is_ip(san) and not is_dns_name(san):
                raise ValueError(f"extra SAN {san!r} is neither a DNS name nor an IP address")

    def dns_names(self) -> list[str]:
        extra = [s for s in self.extra_sans if not is_ip(s)]
        return list(dict.fromkeys([*serving_dns_names(self.service, self.namespace), *extra]))

    def ips(self) -> list[IPAddress]:
        return [ipaddress.ip_address(s) for s in self.extra_sans if is_ip(s)]


@dataclass(frozen=True)
class Policy:
    """Lifetimes; ``overlap`` is how long each CA rotation step waits for every client and replica to follow."""

    validity: datetime.timedelta = datetime.timedelta(days=365)
    ca_validity: datetime.timedelta = datetime.timedelta(days=3650)
    renew_before: datetime.timedelta = datetime.timedelta(days=30)
    overlap: datetime.timedelta = datetime.timedelta(hours=1)

    def __post_init__(self) -> None:
        if not datetime.timedelta(0) < self.renew_before < self.validity <= self.ca_validity:
            raise ValueError("expected 0 < renewBefore < validity <= caValidity")
        if not datetime.timedelta(0) < 2 * self.overlap < self.renew_before:
            raise ValueError("expected 0 < 2 x overlap < renewBefore")


# --- minting ------------------------------------------------------------------------------------


def serving_dns_names(service: str, namespace: str) -> list[str]:
    """Every name a client may use for the Service, so hostname checks pass however it is addressed."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


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
    ips: Sequence[IPAddress],
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


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def issue_serving(target: Target, policy: Policy, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
                  now: datetime.datetime) -> tuple[bytes, bytes]:
    """A serving certificate and key (PEM) from ``ca``, never outliving it."""
    not_after = min(now + policy.validity, ca.not_valid_after_utc)
    cert, key = new_serving_cert(ca, ca_key, serving_common_name(target.service, target.namespace),
                                 target.dns_names(), target.ips(), now - CLOCK_SKEW, not_after)
    return pem(cert), key_pem(key)


def issue_ca(policy: Policy, now: datetime.datetime) -> tuple[bytes, bytes]:
    """A CA and its key (PEM) for ``certs ensure``."""
    # A distinct subject per CA (as kube's self-signed certificates do): verifiers never confuse old and new.
    cert, key = new_ca(f"{CA_COMMON_NAME_PREFIX}@{int(now.timestamp())}", now - CLOCK_SKEW, now + policy.ca_validity)
    return pem(cert), key_pem(key)


# --- reading and judging ------------------------------------------------------------------------


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


def _same_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key is not None and cert.public_key().public_bytes(*fmt) == key.public_key().public_bytes(*fmt)


def _valid_at(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return cert.not_valid_before_utc <= now < cert.not_valid_after_utc


def usable_ca(cert: x509.Certificate | None, key: ec.EllipticCurvePrivateKey | None, now: datetime.datetime) -> bool:
    """A CA certificate with its key, valid at ``now``, allowed to sign."""
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


def serving_problem(cert: x509.Certificate | None, key: ec.EllipticCurvePrivateKey | None, ca: x509.Certificate,
                    target: Target, now: datetime.datetime) -> str | None:
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


def serving_renewal(cert: x509.Certificate | None, key: ec.EllipticCurvePrivateKey | None, ca: x509.Certificate,
                    target: Target, policy: Policy, now: datetime.datetime, *, rotating: bool) -> str | None:
    """Why the serving certificate must be re-issued by ``ca`` now (``serving_problem`` or near expiry), or None.

    While a new CA is coming (``rotating``) a certificate near expiry is left alone: the swap re-issues it
    within the overlap window anyway.
    """
    problem = serving_problem(cert, key, ca, target, now)
    if problem is None and not rotating and cert is not None and cert.not_valid_after_utc - policy.renew_before <= now:
        return "near expiry"
    return problem


def renewal_due(ca: x509.Certificate, policy: Policy, now: datetime.datetime) -> bool:
    """The CA is within ``renew_before`` of its expiry: time to introduce its successor."""
    return ca.not_valid_after_utc - policy.renew_before <= now
