"""Tests for certs.generate: the files must work for a real TLS handshake, not just parse."""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import os
import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.generate import GeneratedCerts, add_parser, generate
from certs.issue import serving_dns_names

pytestmark = pytest.mark.unit

SVC, NS = "svc", "ns"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> GeneratedCerts:
    out = tmp_path_factory.mktemp("certs") / "out"
    return generate(SVC, NS, str(out), extra_dns=["webhook.example.com"], extra_ips=["127.0.0.1", "::1"])


def _cert(path: str) -> x509.Certificate:
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


def _key(path: str) -> ec.EllipticCurvePrivateKey:
    with open(path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def test_serving_dns_names() -> None:
    assert serving_dns_names("a", "b") == ["a", "a.b", "a.b.svc", "a.b.svc.cluster.local"]


def test_files_written_with_expected_names(files: GeneratedCerts) -> None:
    out = os.path.dirname(files.cert)
    assert sorted(os.listdir(out)) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]  # no temp files left
    assert [os.path.basename(p) for p in (files.ca_cert, files.ca_key, files.cert, files.key)] == [
        "ca.crt",
        "ca.key",
        "tls.crt",
        "tls.key",
    ]


def test_permissions(files: GeneratedCerts) -> None:
    assert stat.S_IMODE(os.stat(files.key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(files.ca_key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(files.key)).st_mode) == 0o700


def test_keys_are_p256_pkcs8_and_match_certs(files: GeneratedCerts) -> None:
    for key_path, cert_path in ((files.ca_key, files.ca_cert), (files.key, files.cert)):
        with open(key_path, "rb") as f:
            assert f.read().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS8, unencrypted
        key = _key(key_path)
        assert isinstance(key.curve, ec.SECP256R1)
        assert key.public_key() == _cert(cert_path).public_key()


def test_ca_certificate(files: GeneratedCerts) -> None:
    ca = _cert(files.ca_cert)
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kubenexus-webhook-ca"
    assert ca.issuer == ca.subject
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.key_cert_sign and ku.crl_sign and not ku.digital_signature
    ca.verify_directly_issued_by(ca)


def test_serving_certificate(files: GeneratedCerts) -> None:
    ca, cert = _cert(files.ca_cert), _cert(files.cert)
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "svc.ns.svc"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "svc",
        "svc.ns",
        "svc.ns.svc",
        "svc.ns.svc.cluster.local",
        "webhook.example.com",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.digital_signature and not ku.key_cert_sign
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ski.digest
    assert cert.serial_number != ca.serial_number


def test_validity_window(tmp_path) -> None:
    before = datetime.datetime.now(datetime.UTC)
    cert = _cert(generate(SVC, NS, str(tmp_path), days=10).cert)
    after = datetime.datetime.now(datetime.UTC)
    skew = datetime.timedelta(minutes=5)
    assert before - skew - datetime.timedelta(seconds=1) <= cert.not_valid_before_utc <= after - skew
    assert before + datetime.timedelta(days=10) - datetime.timedelta(seconds=1) <= cert.not_valid_after_utc
    assert cert.not_valid_after_utc <= after + datetime.timedelta(days=10)


def test_ca_bundle_b64(files: GeneratedCerts) -> None:
    with open(files.ca_cert, "rb") as f:
        assert base64.b64decode(files.ca_bundle_b64()) == f.read()


def test_regenerate_replaces_files(tmp_path) -> None:
    first = generate(SVC, NS, str(tmp_path))
    old_serial = _cert(first.cert).serial_number
    second = generate(SVC, NS, str(tmp_path))
    assert second == first
    assert _cert(second.cert).serial_number != old_serial
    _cert(second.cert).verify_directly_issued_by(_cert(second.ca_cert))
    assert sorted(os.listdir(tmp_path)) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]


def test_long_names_fall_back_to_service_cn(tmp_path) -> None:
    svc, ns = "s" * 40, "n" * 40
    cert = _cert(generate(svc, ns, str(tmp_path)).cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == svc
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == serving_dns_names(svc, ns)


def _handshake(files: GeneratedCerts, hostname: str) -> bytes:
    """Serve TLS on loopback with the generated pair; connect verifying ``hostname`` against ca.crt."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(files.cert, files.key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED + check_hostname
    client_ctx.load_verify_locations(files.ca_cert)
    client_ctx.verify_flags |= ssl.VERIFY_X509_STRICT  # the default from Python 3.13 on

    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        port = listener.getsockname()[1]

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                conn.settimeout(10)
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(tls.recv(5))
            except OSError:
                pass  # the failing-verification case aborts the handshake

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client_ctx.wrap_socket(raw, server_hostname=hostname) as tls,
            ):
                tls.sendall(b"hello")
                return tls.recv(5)
        finally:
            thread.join(10)


@pytest.mark.parametrize("hostname", ["svc.ns.svc", "svc.ns.svc.cluster.local", "127.0.0.1"])
def test_tls_handshake_succeeds(files: GeneratedCerts, hostname: str) -> None:
    assert _handshake(files, hostname) == b"hello"


@pytest.mark.parametrize("hostname", ["other.ns.svc", "svc.other.svc", "10.0.0.1"])
def test_tls_handshake_fails_for_wrong_hostname(files: GeneratedCerts, hostname: str) -> None:
    with pytest.raises(ssl.SSLCertVerificationError) as exc:
        _handshake(files, hostname)
    assert "mismatch" in exc.value.verify_message  # rejected for the name, not for the chain


@pytest.mark.parametrize(
    ("kwargs", "argname"),
    [
        ({"service": "Bad_Svc"}, "service"),
        ({"service": ""}, "service"),
        ({"namespace": "ns.with.dots"}, "namespace"),
        ({"namespace": "x" * 64}, "namespace"),
        ({"days": 0}, "days"),
        ({"days": -1}, "days"),
        ({"extra_ips": ["not-an-ip"]}, "extra_ips"),
        ({"extra_ips": "10.0.0.1"}, "extra_ips"),
        ({"extra_dns": ["bad name"]}, "extra_dns"),
    ],
)
def test_invalid_inputs(tmp_path, kwargs: dict, argname: str) -> None:
    args = {"service": SVC, "namespace": NS, **kwargs}
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=rf"^{argname}:"):
        generate(args.pop("service"), args.pop("namespace"), str(out), **args)
    assert not out.exists()  # validated before anything is written


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubenexus certs")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_generate(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["generate", "--service", SVC, "--namespace", NS, "--out", str(out)]
    argv += ["--dns", "a.example.com", "--dns", "b.example.com", "--ip", "10.1.2.3", "--days", "30"]
    args = _parser().parse_args(argv)
    assert args.func(args) == 0

    stdout = capsys.readouterr().out
    with open(out / "ca.crt", "rb") as f:
        assert f"caBundle: {base64.b64encode(f.read()).decode()}" in stdout.splitlines()
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key"):
        assert str(out / name) in stdout
    cert = _cert(str(out / "tls.crt"))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName)[-2:] == ["a.example.com", "b.example.com"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.1.2.3")]


def test_cli_bad_namespace(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    args = _parser().parse_args(["generate", "--service", SVC, "--namespace", "Bad_NS", "--out", str(out)])
    assert args.func(args) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("kubenexus certs generate: namespace:")
    assert "caBundle" not in captured.out
    assert not out.exists()


def test_cli_requires_options() -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["generate", "--service", SVC])
    assert exc.value.code == 2
