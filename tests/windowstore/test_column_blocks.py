"""A key that no batch touches stops pinning an old batch's matrix (windowstore/column_blocks.py), and moving its
columns changes nothing the processor gives: the same updates, windows and counters as the record path."""

from __future__ import annotations

import random

from hypothesis import event, given, settings
from hypothesis import strategies as st

from windowstore import Composite, Count, Field, Max, SlidingWindowProcessor, SlidingWindows, Sum
from windowstore.column_blocks import FIRST_LOOK

from .test_batch import store_contents


def composite() -> Composite:
    return Composite([Count(), Field(Sum(), "v"), Field(Max(), "v")])


def both(td: int, grace: int) -> tuple[SlidingWindowProcessor, SlidingWindowProcessor]:
    """The batch path's processor and the record path's, same definition."""
    return (
        SlidingWindowProcessor(SlidingWindows(td, grace), composite(), "update", batch=True),
        SlidingWindowProcessor(SlidingWindows(td, grace), composite(), "update", batch=False),
    )


def step(bat: SlidingWindowProcessor, rec: SlidingWindowProcessor, chunk: list) -> bool:
    """One batch through both; asserts the same flush; whether the batch path took it."""
    taken = bat.process_batch(chunk)
    for r in chunk:
        rec.process(*r)
    assert bat.flush() == rec.flush()
    return taken


@st.composite
def quieting_streams(draw):
    """Batches over up to 12 keys, each key active from one batch to another (so keys go quiet for good, come
    in late, or stay), mostly in order."""
    n_keys = draw(st.integers(2, 12))
    n_batches = draw(st.integers(FIRST_LOOK + 2, 14))
    batch_no = st.integers(0, n_batches - 1)
    spans = [sorted(draw(st.tuples(batch_no, batch_no))) for _ in range(n_keys)]
    t, batches = 0, []
    for b in range(n_batches):
        active = [k for k, (lo, hi) in enumerate(spans) if lo <= b <= hi] or [0]
        chunk = []
        for _ in range(draw(st.integers(1, 25))):
            t += draw(st.sampled_from([0, 1, 1, 2, 5]))
            ts = max(0, t - draw(st.sampled_from([0, 0, 0, 3])))
            chunk.append((f"k{draw(st.sampled_from(active))}", {"v": draw(st.integers(-9, 9))}, ts))
        batches.append(chunk)
    return draw(st.integers(3, 30)), draw(st.integers(0, 10)), batches


@settings(max_examples=300, deadline=None)
@given(quieting_streams())
def test_compaction_changes_nothing_the_processor_gives(case):
    td, grace, batches = case
    bat, rec = both(td, grace)
    for chunk in batches:
        step(bat, rec, chunk)
    event(f"columns copied: {'some' if bat.state.blocks.copied else 'none'}")
    assert store_contents(bat) == store_contents(rec)
    assert bat.stats.updates_emitted == rec.stats.updates_emitted


def test_a_quiet_key_stops_pinning_its_last_batch_matrix():
    """One key goes quiet after the first batch; the others come back every batch. After ``FIRST_LOOK`` more
    batches the quiet key's columns live in a matrix of their own, and the tracked matrices are the last few
    batches', not one per batch."""
    bat, rec = both(100, 20)
    rng = random.Random(3)
    keys = [f"k{i}" for i in range(40)]
    step(bat, rec, [(k, {"v": rng.randint(0, 9)}, i) for i, k in enumerate(keys)])
    first = bat.store.keys["k0"].cols.matrix.base
    assert first.shape[1] > 10 * len(bat.store.keys["k0"].cols)  # a slice of the batch's matrix of all keys
    sizes = []
    for b in range(1, 12):
        chunk = [(rng.choice(keys[1:]), {"v": rng.randint(0, 9)}, 40 + 80 * (b - 1) + i) for i in range(80)]
        assert step(bat, rec, chunk)
        sizes.append(bat.state.blocks.held_bytes())
    quiet = bat.store.keys["k0"]
    assert quiet.cols.matrix.base is not first and quiet.raw.matrix.base is not first
    assert quiet.cols.matrix.base.shape[1] == len(quiet.cols)  # only its own columns are held
    assert bat.state.blocks.copied > 0
    assert max(sizes[-4:]) <= 1.5 * min(sizes[-4:])  # bounded, not growing with the batches
    assert store_contents(bat) == store_contents(rec)


def test_matrices_every_key_comes_back_to_are_never_copied():
    bat, rec = both(100, 20)
    keys = [f"k{i}" for i in range(10)]
    for b in range(10):
        assert step(bat, rec, [(k, {"v": b}, 30 * b + i) for i, k in enumerate(keys)])
    assert bat.state.blocks.copied == 0
    assert store_contents(bat) == store_contents(rec)
