"""gang.names: gang names as label values the apiserver accepts."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gang.names import MAX_LABEL_VALUE, is_label_value, label_value

pytestmark = pytest.mark.unit

# The apiserver's rule, written out independently: (([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?, at most 63.
_VALID = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def valid(value: str) -> bool:
    return len(value) <= 63 and _VALID.fullmatch(value) is not None


@pytest.mark.parametrize("value", ["", "a", "spark-pi", "A.b_c-1", "9", "x" * 63])
def test_is_label_value_accepts_valid_values(value):
    assert is_label_value(value)


@pytest.mark.parametrize("value", ["x" * 64, "-a", "a-", "_a", "a.", "a b", "a/b", "é", "abc\n", "\nabc"])
def test_is_label_value_rejects_invalid_values(value):
    assert not is_label_value(value)


@pytest.mark.parametrize("name", ["spark-pi", "A.b_c-1", "x" * 63, "7"])
def test_valid_names_are_unchanged(name):
    assert label_value(name) == name


@pytest.mark.parametrize(
    "name",
    ["x" * 64, "a" * 200, "my/app:v1", "-leading", "trailing_", ".", "///", "", "name\n", "Ünïcode", "a b c"],
)
def test_invalid_names_become_valid_label_values(name):
    value = label_value(name)
    assert valid(value) and value
    assert value != name
    assert label_value(name) == value  # stable across calls


def test_readable_stem_is_kept():
    assert label_value("my/app:v1").startswith("my-app-v1-")
    assert label_value("z" * 100).startswith("z" * 40)


def test_names_sharing_a_long_prefix_stay_distinct():
    prefix = "train-" * 20
    values = {label_value(prefix + suffix) for suffix in ("a", "b", "worker-0", "worker-1")}
    assert len(values) == 4
    assert all(len(v) <= MAX_LABEL_VALUE for v in values)


def test_names_that_sanitise_alike_stay_distinct():
    assert len({label_value("a/b"), label_value("a:b"), label_value("a b")}) == 3


def test_lone_surrogate_does_not_crash():
    # Python text may hold lone surrogates (json.loads('"\\ud800"')); they are still just invalid characters.
    assert valid(label_value("job\ud800"))


# Any text (lone surrogates included), plus near-valid names around the 63 limit with one bad ending.
_any_text = st.text(st.sampled_from("aZ9-_./ \né") | st.characters(exclude_categories=()), max_size=120)
_near_valid = st.builds(
    lambda stem, tail: stem + tail,
    st.from_regex(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,70}", fullmatch=True),
    st.sampled_from(["", "a", "\n", "-", "_", "é", "/x"]),
)


@given(_any_text | _near_valid)
def test_label_value_is_always_valid(name):
    value = label_value(name)
    assert is_label_value(value)
    assert valid(value)
    assert label_value(value) == value  # a valid result is a fixed point
