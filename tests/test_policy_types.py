"""The memory policy's enumerated fields are typed (``Literal``); validation reads the types."""

from __future__ import annotations

import pytest

from alphafold_mem.memory.offload import OFFLOAD_LEVELS
from alphafold_mem.memory.policy import AutoPolicy, MemoryPolicy, field_choices
from alphafold_mem.precision import PRECISIONS


def test_choices_come_from_the_types():
    choices = field_choices()
    assert choices["offload"] == tuple(OFFLOAD_LEVELS)
    assert choices["precision"] == PRECISIONS
    assert choices["inplace"] == (False, True)
    assert "chunk_size" not in choices and "max_memory" not in choices  # not enumerated


@pytest.mark.parametrize("name", sorted(field_choices()))
def test_every_typed_value_is_accepted_and_others_refused(name):
    for value in field_choices()[name]:
        assert getattr(MemoryPolicy(**{name: value}), name) == value
    if name != "inplace":
        with pytest.raises(ValueError, match=f"unknown {name} 'no-such-value'"):
            MemoryPolicy(**{name: "no-such-value"})


@pytest.mark.parametrize("value", ["40GB", 4.0e10, True, 0, -5])
def test_max_memory_is_a_positive_int_of_bytes_refused_in_one_line(value):
    for cls in (MemoryPolicy, AutoPolicy):
        with pytest.raises(ValueError, match=r"max_memory must be a positive int number of bytes .* got "):
            cls(max_memory=value)
    assert AutoPolicy(max_memory=40 * 2**30).max_memory == 40 * 2**30
