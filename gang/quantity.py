"""Kubernetes resource quantities: parse to exact numbers, format back canonically."""

from __future__ import annotations

import re
from decimal import Decimal

_SUFFIXES = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Exact value of a quantity such as ``500m``, ``1.5Gi`` or ``2``."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        number = Decimal(str(value))
        if not number.is_finite():
            raise QuantityError(f"not a quantity: {value!r}")
        return number
    match = _QUANTITY.match(str(value).strip())
    # The grammar has an exponent or a suffix, never both ("1e3Ki" is rejected by the apiserver).
    if not match or (match.group(2) and "e" in match.group(1).lower()):
        raise QuantityError(f"not a quantity: {value!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(2) or ""]
    except ArithmeticError:  # InvalidOperation ("1.2.3"), Overflow ("1e9999999")
        raise QuantityError(f"not a quantity: {value!r}") from None


def format_quantity(value: Decimal, resource: str) -> str:
    """Canonical text: millicores for cpu-like fractions, binary suffixes for whole byte counts."""
    if value == value.to_integral_value():
        whole = int(value)
        if resource == "memory" or resource.endswith("storage"):
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                unit = int(_SUFFIXES[suffix])
                if whole and whole % unit == 0:
                    return f"{whole // unit}{suffix}"
        return str(whole)
    milli = (value * 1000).to_integral_value(rounding="ROUND_CEILING")
    return f"{int(milli)}m"
