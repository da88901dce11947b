"""Last-box extraction: nested braces, escapes, several boxes, malformed boxes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pairht.verifiers.boxed import MalformedBoxError, last_boxed

# Balanced LaTeX-ish text: atoms (including escaped braces) and nested {...} groups.
_atom = st.sampled_from(["1", "x", "+", r"\frac", r"\{", r"\}", " ", r"\sqrt", "^", ","])
_balanced = st.recursive(
    st.lists(_atom, max_size=4).map("".join),
    lambda inner: st.lists(
        st.one_of(_atom, inner.map(lambda s: "{" + s + "}")), max_size=4
    ).map("".join),
    max_leaves=20,
)


@given(body=_balanced, earlier=_balanced, prose=st.text(alphabet="abc .", max_size=10))
def test_last_box_round_trips_any_balanced_body(body, earlier, prose):
    text = f"{prose} \\boxed{{{earlier}}} then {prose} \\boxed{{{body}}}{prose}"
    assert last_boxed(text) == body


@given(body=_balanced)
def test_unclosed_last_box_is_malformed_even_after_a_good_box(body):
    with pytest.raises(MalformedBoxError):
        last_boxed(r"\boxed{1} and \boxed{" + body)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\fbox{7}", "7"),
        (r"\boxed 5 is it", "5"),
        (r"$\boxed{3}$.", "3"),
        (r"\boxed{}", ""),
        (r"\boxed {2}", "2"),
        (r"\boxed{\boxed{4}}", "4"),
        (r"\boxedx{3}", None),  # a different command, not a box
        ("nothing", None),
    ],
)
def test_last_box_cases(text, expected):
    assert last_boxed(text) == expected


def test_last_box_rejects_non_string():
    with pytest.raises(ValueError, match="text must be a str"):
        last_boxed(3)  # type: ignore[arg-type]
