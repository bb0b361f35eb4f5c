"""windowstore.pending: the emit-on-close waiting windows against a plain heap of (start, key bytes, key)."""

from __future__ import annotations

import heapq
import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from windowstore.pending import MAX_RUNS, PendingWindows
from windowstore.store import key_bytes

KEYS = st.sampled_from(["a", "b", "ab", "é", "z", "", "B"])
STARTS = st.integers(0, 40)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), STARTS, KEYS),
        st.tuples(st.just("run"), st.lists(st.tuples(STARTS, KEYS), max_size=12)),
        st.tuples(st.just("pop"), st.integers(-1, 45)),
        st.tuples(st.just("any"), STARTS, STARTS),
        st.tuples(st.just("state")),
    ),
    max_size=60,
)


@settings(max_examples=500, deadline=None)
@given(OPS)
def test_same_pops_as_a_heap(ops):
    p = PendingWindows()
    model: list[tuple[int, bytes, str]] = []
    for op in ops:
        if op[0] == "push":
            p.push(op[1], op[2])
            heapq.heappush(model, (op[1], key_bytes(op[2]), op[2]))
        elif op[0] == "run":
            p.add_run(np.array([s for s, _k in op[1]], np.int64), [k for _s, k in op[1]])
            for s, k in op[1]:
                heapq.heappush(model, (s, key_bytes(k), k))
        elif op[0] == "pop":
            want = []
            while model and model[0][0] <= op[1]:
                s, _kb, k = heapq.heappop(model)
                want.append((s, k))
            starts, keys = p.pop_through(op[1])
            assert list(zip(starts, keys, strict=True)) == want
            assert all(type(s) is int for s in starts)
        elif op[0] == "any":
            lo, hi = op[1], op[2]
            assert p.any_in(lo, hi) == any(lo <= s <= hi for s, _kb, _k in model)
        else:
            p = PendingWindows.from_state(pickle.loads(pickle.dumps(p.to_state())))
        assert len(p) == len(model)
        assert sorted(p.items()) == sorted((s, k) for s, _kb, k in model)


def test_ties_by_key_bytes_not_by_str_order():
    # "é" (U+00E9) sorts after "z" as UTF-8 bytes (0xC3...) and as code points; "B" < "a" either way
    p = PendingWindows()
    p.add_run(np.array([5, 5, 5, 5]), ["z", "é", "a", "B"])
    p.push(5, "b")
    assert p.pop_through(5) == ([5] * 5, ["B", "a", "b", "z", "é"])


def test_many_runs_are_merged():
    p = PendingWindows()
    for i in range(MAX_RUNS * 3):
        p.add_run(np.array([i, 1000 - i]), [f"k{i}", f"k{i}"])
    assert len(p._runs) <= MAX_RUNS
    starts, _keys = p.pop_through(10_000)
    assert starts == sorted(starts) and len(starts) == MAX_RUNS * 6


def test_reads_the_earlier_heap_form():
    old = [(3, b"a", "a"), (7, b"b", "b"), (5, b"a", "a")]
    heapq.heapify(old)
    p = PendingWindows.from_state(old)
    assert p.pop_through(100) == ([3, 5, 7], ["a", "a", "b"])
