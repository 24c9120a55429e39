"""Names, label keys and values (apimachinery util/validation): DNS-1123 labels and subdomains, qualified
names, label values — with upstream's messages, double spaces included, and Go's byte lengths."""

from __future__ import annotations

import re
from typing import Any

from cluster.validation.errors import invalid


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError, including its double space before each "or"."""
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"
_LABEL_MSG = _regex_error("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                          "and must start and end with an alphanumeric character", _LABEL_FMT, "my-name", "123-abc")
_SUBDOMAIN_MSG = _regex_error("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                              "'-' or '.', and must start and end with an alphanumeric character", _SUBDOMAIN_FMT,
                              "example.com")
_QNAME_MSG = _regex_error("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                          "alphanumeric character", _QNAME_FMT, "MyName", "my.name", "123-abc")
_LABEL_VALUE_MSG = _regex_error("a valid label must be an empty string or consist of alphanumeric characters, '-', "
                                "'_' or '.', and must start and end with an alphanumeric character", _LABEL_VALUE_FMT,
                                "MyValue", "my_value", "12345")


def _matches(fmt: str, value: str) -> bool:
    """Go's ``^fmt$`` (fullmatch: Python's ``$`` would also accept a trailing newline)."""
    return re.fullmatch(fmt, value) is not None


def byte_size(value: str) -> int:
    """Go's len(): bytes, not characters."""
    return len(value.encode())


def dns1123_label(value: str) -> list[str]:
    errs = [_max_len(63)] if byte_size(value) > 63 else []
    if not _matches(_LABEL_FMT, value):
        errs.append("must not contain dots" if _matches(_SUBDOMAIN_FMT, value) else _LABEL_MSG)
    return errs


def dns1123_subdomain(value: str) -> list[str]:
    errs = [_max_len(253)] if byte_size(value) > 253 else []
    return errs + ([] if _matches(_SUBDOMAIN_FMT, value) else [_SUBDOMAIN_MSG])


def qualified_name(value: str) -> list[str]:
    """IsQualifiedName: ``[prefix/]name`` — prefix a DNS subdomain, name at most 63 characters."""
    parts = value.split("/")
    if len(parts) > 2:
        return [f"a qualified name {_QNAME_MSG} with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    errs: list[str] = []
    if len(parts) == 2:
        prefix = parts[0]
        errs += ["prefix part must be non-empty"] if not prefix else [f"prefix part {m}"
                                                                       for m in dns1123_subdomain(prefix)]
    name = parts[-1]
    if not name:
        errs.append("name part must be non-empty")
    elif byte_size(name) > 63:
        errs.append(f"name part {_max_len(63)}")
    if not _matches(_QNAME_FMT, name):
        errs.append(f"name part {_QNAME_MSG}")
    return errs


def label_value(value: str) -> list[str]:
    errs = [_max_len(63)] if byte_size(value) > 63 else []
    return errs + ([] if _matches(_LABEL_VALUE_FMT, value) else [_LABEL_VALUE_MSG])


def labels_errors(labels: Any, path: str) -> list[str]:
    """ValidateLabels: every error is reported at the map's path, with the bad key or value."""
    errs: list[str] = []
    for key, value in (labels or {}).items():
        errs += [invalid(path, key, m) for m in qualified_name(key)]
        if isinstance(value, str):  # other types never decode (see decode_errors)
            errs += [invalid(path, value, m) for m in label_value(value)]
    return errs


def mask_trailing_dash(name: str) -> str:
    """generic.go maskTrailingDash: a generateName prefix may end in '-'."""
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name
