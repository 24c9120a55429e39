"""Resource quantities as apimachinery's ``resource.Quantity`` has them: parsing, exact values, canonical text.

Ported from kubernetes/kubernetes staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go (ParseQuantity,
String, CanonicalizeBytes). The emulator's validation, semantic equality and scheduler arithmetic all read
quantities through here, so a value means the same thing everywhere in the emulator, as in a cluster.
"""

from __future__ import annotations

import decimal
import functools
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

_SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_ERR_FORMAT = f"quantities must match the regular expression '{_SPLIT_RE}'"
_ERR_SUFFIX = "unable to parse quantity's suffix"
_DIGITS = "0123456789"
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SI_BY_EXPONENT = {exp: suffix for suffix, exp in _DECIMAL_SI.items()}
_BINARY_BY_POWER = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_EXACT = decimal.Context(prec=4000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_NANO = Decimal("1e-9")


class QuantityError(ValueError):
    """Not a quantity; the apiserver fails the request body's decoding (HTTP 400), not validation."""


@dataclass(frozen=True)
class Quantity:
    """An exact quantity and its format; ``str()`` is Quantity.String() (canonical: "1536Mi", "500m")."""

    value: Decimal
    format: str  # "DecimalSI" | "BinarySI" | "DecimalExponent"

    def __str__(self) -> str:
        if not self.value:
            return "0"
        fmt = self.format
        if fmt == "BinarySI" and (abs(self.value) < 1024 or self.value != self.value.to_integral_value()):
            fmt = "DecimalSI"  # CanonicalizeBytes: small or fractional binary values print as decimal
        if fmt == "BinarySI":
            number, power = int(self.value), 0
            while number % 1024 == 0 and power < len(_BINARY_BY_POWER) - 1:
                number, power = number // 1024, power + 1
            return f"{number}{_BINARY_BY_POWER[power]}"
        mantissa, exponent = _canonical_decimal(self.value)
        if fmt == "DecimalExponent":
            return f"{mantissa}e{exponent}" if exponent else str(mantissa)
        while exponent > 18:
            mantissa, exponent = mantissa * 1000, exponent - 3
        return f"{mantissa}{_SI_BY_EXPONENT[exponent]}"


def _canonical_decimal(value: Decimal) -> tuple[int, int]:
    """AsCanonicalBytes: all factors of ten into the exponent, then the exponent down to a multiple of 3."""
    sign, digits, exponent = value.normalize(_EXACT).as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits))) * (-1 if sign else 1)
    while exponent % 3:
        mantissa, exponent = mantissa * 10, exponent - 1
    return mantissa, exponent


def _quantity_text(raw: Any) -> str:
    """The text Quantity.UnmarshalJSON parses: a JSON string's content or a JSON number's literal."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int | float | str):
        return str(raw).strip()
    raise QuantityError(_ERR_FORMAT)


def _scan(text: str) -> tuple[bool, str, str, str]:
    """parseQuantityString: (negative, integer digits, fraction digits, suffix)."""
    pos, end = 0, len(text)
    negative = text[0] == "-"
    pos += text[0] in "+-"
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return negative, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num, denom = text[start:pos] or "0", ""
    if pos < end and text[pos] == ".":
        start = pos = pos + 1
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in "eEinumkKMGTP":
        pos += 1
    pos += pos < end and text[pos] in "+-"
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(_ERR_FORMAT)
    return negative, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    """suffixHandler.interpret: (base, exponent, format)."""
    if suffix in _DECIMAL_SI:
        return 10, _DECIMAL_SI[suffix], "DecimalSI"
    if suffix in _BINARY_SI:
        return 2, _BINARY_SI[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        exponent = int(suffix[1:])
        if abs(exponent) < 2**63:
            return 10, (exponent + 2**31) % 2**32 - 2**31, "DecimalExponent"  # Go: int32(ParseInt(...))
    raise QuantityError(_ERR_SUFFIX)


def parse_quantity(raw: Any) -> Quantity:
    """ParseQuantity: exact value, rounded up to 1n like the apiserver (binary values capped at 2^63-1).

    The same few texts recur in every pod the scheduler and kubelets count, so each scalar is parsed once."""
    return _parse_cached(raw) if isinstance(raw, str | int | float) else _parse(raw)


def _parse(raw: Any) -> Quantity:
    text = _quantity_text(raw)
    if not text:
        raise QuantityError(_ERR_FORMAT)
    negative, num, denom, suffix = _scan(text)
    base, exponent, fmt = _interpret(suffix)
    amount = Decimal(f"{num}.{denom}" if denom else num)
    amount = amount.scaleb(exponent, _EXACT) if base == 10 else _EXACT.multiply(amount, _EXACT.power(2, exponent))
    if isinstance(places := amount.as_tuple().exponent, int) and places < -9:  # finer than 1n
        amount = amount.quantize(_NANO, rounding=decimal.ROUND_UP, context=_EXACT)
    if fmt == "BinarySI":
        amount = min(amount, Decimal(2**63 - 1))
        if 0 < amount < 1:
            fmt = "DecimalSI"
    return Quantity(-amount if negative else amount, fmt)


# typed: True and 1 hash alike, and only the integer is a quantity.
_parse_cached = functools.lru_cache(maxsize=4096, typed=True)(_parse)


def parse_or_none(raw: Any) -> Quantity | None:
    """The quantity, or None where the body would not decode (validation reports those apart)."""
    try:
        return parse_quantity(raw)
    except QuantityError:
        return None
