"""Hypothesis strategies shared by the fuzz tests: any JSON value, at any depth."""

from __future__ import annotations

from hypothesis import strategies as st

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
