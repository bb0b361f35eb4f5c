"""service.python_daemon: what a reused Python worker does between two tasks (``BetweenTasks``)."""

from __future__ import annotations

import gc
import weakref

import pytest

pytest.importorskip("pyspark")

import pyspark.daemon  # noqa: E402

from service import python_daemon  # noqa: E402
from service.python_daemon import BetweenTasks  # noqa: E402


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> Node:
    """One node of a reference cycle of two: the cycle is garbage once the caller drops it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a


@pytest.fixture(autouse=True)
def _collector_put_back():
    yield
    gc.unfreeze()
    gc.enable()


def test_the_daemon_sees_it():
    assert isinstance(pyspark.daemon.gc, BetweenTasks)
    assert python_daemon.worker is pyspark.daemon.worker
    assert pyspark.daemon.gc.isenabled() == gc.isenabled()  # everything else is the gc module's


def test_what_survives_a_task_is_frozen_until_every_full_every_th_call():
    between = BetweenTasks()
    held = [cycle()]
    ref = weakref.ref(held[0])
    between.collect()  # after task 1: the cycle is alive, so it survives and is frozen
    assert gc.get_freeze_count() > 0
    held.clear()  # now it is garbage, but frozen: young and automatic collections skip it
    for _ in range(BetweenTasks.FULL_EVERY - 2):
        between.collect()
        gc.collect()  # a full collection of the collector's own does not see frozen objects either
        assert ref() is not None
    between.collect()  # the FULL_EVERY-th call: unfreeze, full collection
    assert ref() is None


def test_young_cycles_go_after_the_task_that_made_them():
    between = BetweenTasks()
    ref = weakref.ref(cycle())  # garbage already
    assert between.collect() >= 2
    assert ref() is None


def test_an_explicit_young_generation_is_just_collected():
    between = BetweenTasks()
    assert between.collect(0) >= 0
    assert between.collect(1) >= 0
    assert gc.get_freeze_count() == 0
