"""Key blobs of batch-path keys (format 2, written from the numpy columns): exact round trip, readable by a
processor with or without the batch path, and strict about malformed input."""

from __future__ import annotations

import random

import numpy as np
import pytest

from windowstore import Composite, Count, Field, Max, Mean, Min, SlidingWindowProcessor, SlidingWindows, Sum
from windowstore.serde import (
    KEY_FORMAT_COLUMNS,
    StateFormatError,
    decode_key_windows,
    encode_key_windows,
    entries_from_columns,
)

from .reference import save_state

AGGS = [Count, Sum, Min, Max, Mean, lambda: Composite([Count(), Field(Sum(), "v"), Field(Max(), "v")])]


def records(seed: int, n: int = 400, keys: int = 5, floats: bool = False):
    rnd = random.Random(seed)
    out = []
    t = 0
    for _ in range(n):
        t += rnd.randint(0, 30)
        ts = max(0, t - rnd.randint(0, 40)) if rnd.random() < 0.1 else t
        v = rnd.random() * 100 if floats else rnd.randint(-50, 50)
        out.append((f"k{rnd.randrange(keys)}", v, ts))
    return out


def as_values(make, recs):
    composite = isinstance(make(), Composite)
    return [(k, {"v": v} if composite else v, t) for k, v, t in recs]


def run_batches(make, recs, size, batch_flags, td=100, grace=50):
    """Process ``recs`` in batches of ``size`` over external state; ``batch_flags[i]``: batch path on in batch i."""
    w = SlidingWindows(td, grace)
    backend: dict = {}
    meta = None
    out = []
    for i, b in enumerate(range(0, len(recs), size)):
        batch = batch_flags[i % len(batch_flags)]
        proc = SlidingWindowProcessor.from_state(w, make(), "update", meta, backend.get, batch=batch)
        chunk = recs[b : b + size]
        if batch:
            proc.process_batch(chunk)
        else:
            for r in chunk:
                proc.process(*r)
        out.append(proc.flush())
        meta = save_state(proc, backend)
    return out, backend


@pytest.mark.parametrize("make", AGGS)
@pytest.mark.parametrize("floats", [False, True])
def test_columns_round_trip(make, floats):
    recs = as_values(make, records(1, floats=floats))
    proc = SlidingWindowProcessor(SlidingWindows(100, 50), make(), "update", batch=True)
    proc.process_batch(recs)
    proc.flush()
    held = [kw for kw in proc.store.keys.values() if kw.cols is not None]
    if not held:
        pytest.skip("the batch path did not apply (inexact values)")
    for kw in held:
        blob = encode_key_windows(kw)
        assert blob[0] == KEY_FORMAT_COLUMNS
        back = decode_key_windows(blob)
        for a, b in [
            (back.cols.starts, kw.cols.starts),
            (back.cols.ts, kw.cols.ts),
            (back.cols.counts, kw.cols.counts),
            (back.raw.ts, kw.raw.ts),
        ]:
            assert a.dtype == b.dtype and np.array_equal(a, b)
        for a, b in [*zip(back.cols.parts, kw.cols.parts, strict=True), *zip(back.raw.cols, kw.raw.cols, strict=True)]:
            assert (a is None) == (b is None)
            if a is not None:
                assert a.dtype == b.dtype and np.array_equal(a, b)
                a[:1] = a[:1]  # writable: the batch kernel may update columns in place


@pytest.mark.parametrize("make", AGGS)
@pytest.mark.parametrize("seed", [7, 8, 9])
def test_batch_path_over_columns_blobs(make, seed):
    """Batch after batch over external state (keys read back as columns; partially-late records make the batch
    path fall back to the record path on such keys): the record path's output."""
    recs = as_values(make, records(seed, n=600))
    want, _ = run_batches(make, recs, 60, [False])
    got, backend = run_batches(make, recs, 60, [True])
    assert got == want
    if make is not Mean:
        assert any(b[0] == KEY_FORMAT_COLUMNS for b in backend.values())


@pytest.mark.parametrize("make", AGGS)
def test_entries_from_columns(make):
    """A columns blob turned into entries (a processor without the batch path) equals the in-memory key."""
    recs = as_values(make, records(5))
    proc = SlidingWindowProcessor(SlidingWindows(100, 50), make(), "update", batch=True)
    proc.process_batch(recs)
    proc.flush()
    blobs = {k: encode_key_windows(kw) for k, kw in proc.store.keys.items() if kw.cols is not None}
    for key, blob in blobs.items():
        back = decode_key_windows(blob)
        entries_from_columns(back, make())
        kw = proc.store.load(key)
        assert (back.starts, back.entries, back.raw.ts, back.raw.cols) == (
            kw.starts,
            kw.entries,
            kw.raw.ts,
            kw.raw.cols,
        )


def test_malformed_columns_blob_is_an_error():
    recs = records(3)
    proc = SlidingWindowProcessor(SlidingWindows(100, 50), Sum(), "update", batch=True)
    proc.process_batch(recs)
    blob = encode_key_windows(next(kw for kw in proc.store.keys.values() if kw.cols is not None))
    with pytest.raises(StateFormatError):
        decode_key_windows(blob[:-3])
    with pytest.raises(StateFormatError):
        decode_key_windows(blob[:10] + bytes([9]) + blob[11:])  # unknown column type code


def test_batch_path_reads_columns_blobs_as_columns():
    """A key stored as columns and read back by the batch path stays columns: it is never turned into entries
    (and back) on the way in - what a worker-cache miss in the service pays for every key it touches."""
    w = SlidingWindows(100, 50)
    recs = [(f"k{i % 5}", i % 7, 3 * i) for i in range(400)]  # in order: the batch path always applies
    backend: dict = {}
    proc = SlidingWindowProcessor(w, Sum(), "update", batch=True)
    proc.process_batch(recs[:200])
    proc.flush()
    meta = save_state(proc, backend)
    assert all(blob[0] == KEY_FORMAT_COLUMNS for blob in backend.values())

    reread = SlidingWindowProcessor.from_state(w, Sum(), "update", meta, backend.get, batch=True)
    materialized = []
    codec = reread.store.columnar

    class Spy:  # the store's columnar codec, recording every key it turns into entries
        def materialize(self, kw):
            materialized.append(kw)
            codec.materialize(kw)

        def trim(self, kw, bound):
            return codec.trim(kw, bound)

    reread.store.columnar = Spy()
    reread.process_batch(recs[200:])
    assert materialized == []

    whole = SlidingWindowProcessor(w, Sum(), "update")
    for r in recs[:200]:
        whole.process(*r)
    whole.flush()
    for r in recs[200:]:
        whole.process(*r)
    assert reread.flush() == whole.flush()
