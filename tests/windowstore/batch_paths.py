"""What the window-type batch-path property tests share: the same batches through one path or the other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def wrap(agg: str, v: Any) -> Any:
    """A record's value as the aggregation reads it (``sum:x`` reads field ``x``)."""
    return {"x": v} if ":" in agg else v


def run_batches(
    proc: Any,
    process_batch: Callable[..., list],
    batches: list,
    agg: str,
    batch_path: bool,
    flush_every: list[bool],
) -> list:
    """Every batch of ``(key, value, ts)`` through ``process_batch`` (the batch path) or ``proc.process`` record by
    record, with a flush after the batches ``flush_every`` marks and one at the end; what was emitted, in order."""
    out: list = []
    for recs, flush in zip(batches, flush_every, strict=False):
        keys = [k for k, _v, _t in recs]
        values = [wrap(agg, v) for _k, v, _t in recs]
        ts = [t for _k, _v, t in recs]
        try:
            if batch_path:
                out += process_batch(proc, keys, ts, values)
            else:
                got: list = []
                for k, v, t in zip(keys, values, ts, strict=True):
                    got += proc.process(k, v, t)
                out += got
        except TypeError as e:  # a value the aggregation cannot take: raised at the same record on both paths
            out.append(("error", type(e).__name__))  # (the batch's output is lost with it, on both paths)
        if flush:
            out += proc.flush()
    out += proc.flush()
    return out
