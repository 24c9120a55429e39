"""Names the apiserver and TLS clients accept: label values (gang names), DNS-1123 labels (object names),
DNS names and IP addresses (a serving certificate's SANs, also validated in the configuration)."""

from __future__ import annotations

import hashlib
import ipaddress
import re

MAX_LABEL_VALUE = 63
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_INVALID_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_HASH_LEN = 10
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?$")


def is_label_value(value: str) -> bool:
    """True when the apiserver accepts ``value`` as a label value."""
    return len(value) <= MAX_LABEL_VALUE and bool(_LABEL_VALUE.fullmatch(value))  # $ also matches before \n


def is_dns_subdomain(value: str) -> bool:
    """True when the apiserver accepts ``value`` as the name of most objects (a Queue's, for one): at most 253
    characters, dot-separated lowercase DNS-1123 labels."""
    return len(value) <= 253 and all(DNS1123_LABEL.fullmatch(part) for part in value.split("."))


def is_label_key(key: str) -> bool:
    """True when the apiserver accepts ``key`` as a label key: an optional DNS-subdomain prefix and ``/``, then a
    name of at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric."""
    prefix, slash, name = key.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return bool(name) and is_label_value(name)


def label_value(name: str) -> str:
    """A stable valid label value for ``name``.

    Valid names are returned unchanged (that is what users type in ``-l``); anything else is
    sanitised and, if it was changed or too long, suffixed with a hash of the original so
    that two different long names never collide.
    """
    if name and is_label_value(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]
    stem = _INVALID_CHARS.sub("-", name)[: MAX_LABEL_VALUE - _HASH_LEN - 1]
    stem = stem.strip("-_.")
    return f"{stem}-{digest}" if stem else digest


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
    return all(_DNS_LABEL.fullmatch(label) for label in labels)
