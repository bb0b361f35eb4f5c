"""RowBlock: encoded rows back to back in one buffer, read as a sequence of bytes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.rows import RowBlock


@given(st.lists(st.binary(max_size=20), max_size=50))
def test_of_keeps_every_row(rows):
    block = RowBlock.of(rows)
    assert block is not None
    assert len(block) == len(rows)
    assert block.tolist() == list(block) == rows
    assert block == rows and block == tuple(rows)
    assert [block[i] for i in range(len(rows))] == rows
    assert [block[-i] for i in range(1, len(rows) + 1)] == rows[::-1]
    assert block[1:3] == rows[1:3]
    assert block.lengths().tolist() == [len(r) for r in rows]
    assert (block.starts() + block.lengths()).tolist() == block.ends.tolist()
    assert RowBlock.of(block) is block
    assert pickle.loads(pickle.dumps(block)) == block


def test_bounds():
    #   data: |ab|c||def|    ends: 2 3 3 6   (the third row is empty)
    block = RowBlock(b"abcdef", np.array([2, 3, 3, 6]))
    assert block.tolist() == [b"ab", b"c", b"", b"def"]
    assert block.starts().tolist() == [0, 2, 3, 3]
    with pytest.raises(IndexError):
        block[4]
    with pytest.raises(IndexError):
        block[-5]
    assert block != [b"ab", b"c", b"", b"de"]
    assert block != RowBlock(b"abcdef", np.array([2, 3, 4, 6]))


def test_uniform_rows():
    assert RowBlock.uniform(b"aabbcc", 2).tolist() == [b"aa", b"bb", b"cc"]
    assert RowBlock.uniform(b"", 3).tolist() == []
    with pytest.raises(ValueError, match="7 bytes are not rows of 2"):
        RowBlock.uniform(b"aabbccd", 2)


def test_what_a_block_cannot_hold():
    assert RowBlock.of([b"a", None]) is None  # null rows: the caller takes the per-row path
    with pytest.raises(ValueError, match="the last row ends at 3, the data has 4 bytes"):
        RowBlock(b"abcd", np.array([1, 3]))


def test_values_with_nulls_are_a_block_and_a_mask():
    block, nulls = RowBlock.of_values([b"a", None, b"bc", None])
    assert block.tolist() == [b"a", b"", b"bc", b""]
    assert nulls is not None and nulls.tolist() == [False, True, False, True]
    block, nulls = RowBlock.of_values([b"a", b"bc"])
    assert block.tolist() == [b"a", b"bc"] and nulls is None
