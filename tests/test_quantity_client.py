"""The core's quantity parser agrees with the official client's ``kubernetes.utils.parse_quantity``.

The core keeps its own parser (gang/quantity.py) because it must not import the client (ARCHITECTURE.md: a
dependency-free core); this property test makes the client's parser the reference it is checked against.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as client_parse

from gang.quantity import QuantityError, parse_quantity

pytestmark = pytest.mark.unit

SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]
numbers = st.one_of(
    st.integers(min_value=0, max_value=10**12).map(str),
    st.decimals(min_value=Decimal(0), max_value=Decimal(10**9), places=3, allow_nan=False,
                allow_infinity=False).map(lambda d: format(d, "f")),
)


@given(numbers, st.sampled_from(SUFFIXES))
def test_every_valid_quantity_parses_to_the_clients_value(number: str, suffix: str) -> None:
    text = number + suffix
    assert parse_quantity(text) == client_parse(text)


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=-3, max_value=3))
def test_decimal_exponents_agree(mantissa: int, exponent: int) -> None:
    text = f"{mantissa}e{exponent}"
    assert parse_quantity(text) == client_parse(text)


# The client is more lenient than the apiserver in one place: it accepts "1 Gi" (a space before the suffix),
# which the apiserver's quantity grammar rejects, and so does the core.
@pytest.mark.parametrize("text", ["", "abc", "1.5.5", "1Kb", "Mi", "--1"])
def test_both_reject_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        client_parse(text)
    with pytest.raises(QuantityError):
        parse_quantity(text)
