"""Self-signed CA and serving certificate for the admission webhook.

The apiserver only calls webhooks over TLS, verifying the serving certificate against the
``caBundle`` in the webhook configuration. ``kubenexus certs generate`` writes both to
disk (minted by ``certs.issue``) so a cluster without cert-manager can still run the webhook.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from certs.issue import (
    CLOCK_SKEW,
    IPAddress,
    key_pem,
    new_ca,
    new_serving_cert,
    pem,
    serving_common_name,
    serving_dns_names,
)
from certs.store import write_atomic
from gang.names import DNS1123_LABEL, is_dns_name

CA_COMMON_NAME = "kubenexus-webhook-ca"


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
    write_atomic(paths.ca_cert, pem(ca_cert), 0o644)
    write_atomic(paths.key, key_pem(key), 0o600)
    write_atomic(paths.cert, pem(cert), 0o644)
    return paths


def validate_names(
    service: str, namespace: str, extra_dns: Sequence[str], extra_ips: Sequence[str], days: int
) -> list[IPAddress]:
    """Reject bad input with a message naming the argument; returns the parsed IPs."""
    for arg, value in (("service", service), ("namespace", namespace)):
        if not isinstance(value, str) or not DNS1123_LABEL.fullmatch(value):
            raise ValueError(f"{arg}: {value!r} is not a DNS-1123 label (lowercase a-z0-9 and '-', max 63)")
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"days: must be an integer >= 1, got {days!r}")
    for arg, seq in (("extra_dns", extra_dns), ("extra_ips", extra_ips)):
        if isinstance(seq, str | bytes):  # a lone string would silently iterate per character
            raise ValueError(f"{arg}: expected a sequence of strings, got the string {seq!r}")
    for name in extra_dns:
        if not is_dns_name(name):
            raise ValueError(f"extra_dns: {name!r} is not a valid DNS name")
    ips: list[IPAddress] = []
    for addr in extra_ips:
        try:
            ips.append(ipaddress.ip_address(addr))
        except ValueError:
            raise ValueError(f"extra_ips: {addr!r} is not a valid IP address") from None
    return ips


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        print(f"kubenexus certs generate: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kubenexus certs generate: {e}", file=sys.stderr)
        return 1
    print(f"ca.crt: {result.ca_cert}")
    print(f"ca.key: {result.ca_key}")
    print(f"tls.crt: {result.cert}")
    print(f"tls.key: {result.key}")
    print(f"caBundle: {result.ca_bundle_b64()}")
    return 0
