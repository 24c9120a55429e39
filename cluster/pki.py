"""The emulated apiserver's serving certificate: a cluster CA and a certificate it signs, as kubeadm lays them out.

Clients verify the apiserver against the CA in their kubeconfig (``certificate-authority-data``), exactly as
against a real cluster. The emulator mints its own rather than borrowing the product's certificate code: it is
test equipment for that product.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The names kubeadm puts in apiserver.crt for the in-cluster Service, plus how a local client dials it.
SERVING_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
                 "localhost")
SERVING_IPS = ("127.0.0.1",)
_VALIDITY = datetime.timedelta(days=365)
_CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class ServingFiles:
    """PEM files: the CA certificate clients trust, and the apiserver's certificate and key."""

    ca_cert: str
    cert: str
    key: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA signs certificates; the serving key signs TLS handshakes (strict verifiers check both)."""
    return x509.KeyUsage(digital_signature=not ca, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                         encipher_only=False, decipher_only=False)


def _write(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def write_serving_files(directory: str) -> ServingFiles:
    """A new CA (``ca.crt``) and a serving certificate it signs (``apiserver.crt``/``apiserver.key``) in
    ``directory``; the CA's key is never written, so nothing else can be signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("kubernetes")

    def builder(subject: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(public_key)
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - _CLOCK_SKEW).not_valid_after(now + _VALIDITY))

    ca_id = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (builder(ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(_key_usage(ca=True), critical=True)
          .add_extension(ca_id, critical=False)
          .sign(ca_key, hashes.SHA256()))
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in SERVING_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVING_IPS]
    serving = (builder(_name("kube-apiserver"), key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(_key_usage(ca=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
               .add_extension(x509.SubjectAlternativeName(sans), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_id), critical=False)
               .sign(ca_key, hashes.SHA256()))

    os.makedirs(directory, mode=0o700, exist_ok=True)
    files = ServingFiles(*(os.path.join(directory, n) for n in ("ca.crt", "apiserver.crt", "apiserver.key")))
    _write(files.ca_cert, ca.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(files.cert, serving.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(files.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()), 0o600)
    return files
