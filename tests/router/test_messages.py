"""
L{meshroute.messages.message_of}: the same message as L{Message}'s own
constructor, made without it.
"""

from dataclasses import FrozenInstanceError, fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshroute.messages import Message, message_of


@given(st.tuples(
    st.text(), st.text(), st.text(), st.text(), st.binary(),
    st.dictionaries(st.text(), st.text(), max_size=3), st.integers(0, 100), st.booleans(),
    st.floats(allow_nan=False),
))
def test_message_of_makes_the_message_its_constructor_makes(values):
    made = message_of(*values)
    assert type(made) is Message
    assert made == Message(*values)
    assert [getattr(made, field.name) for field in fields(Message)] == list(values)


def test_a_message_made_so_is_as_frozen():
    made = message_of("m", "a", "b", "q", b"", {}, 0, False, 1.5)
    with pytest.raises(FrozenInstanceError):
        made.hops = 1
