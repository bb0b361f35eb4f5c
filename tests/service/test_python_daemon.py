"""service.spark.python_daemon: what a reused Python worker does between two tasks (``BetweenTasks``)."""

from __future__ import annotations

import gc
import weakref

import pytest

pytest.importorskip("pyspark")

import pyspark.daemon

from service.spark import python_daemon
from service.spark.python_daemon import BetweenTasks


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


def test_keep_memory_sets_the_allocators_before_the_workers_import_numpy():
    import subprocess
    import sys

    code = (
        "import os, sys; os.environ.pop('NUMPY_MADVISE_HUGEPAGE', None); "
        "from service.spark.python_daemon import keep_memory; print(','.join(keep_memory())); "
        "import numpy; from numpy._core.multiarray import _get_madvise_hugepage; print(_get_madvise_hugepage())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0].split(",")[0] == "numpy" and out[1] == "False"
    if sys.platform.startswith("linux") and "glibc" in " ".join(__import__("platform").libc_ver()):
        assert "malloc" in out[0].split(",")
    # a value the user set is kept
    code2 = (
        "import os; os.environ['NUMPY_MADVISE_HUGEPAGE'] = '1'; from service.spark.python_daemon import keep_memory; "
        "print(keep_memory(), os.environ['NUMPY_MADVISE_HUGEPAGE'])"
    )
    out2 = subprocess.run([sys.executable, "-c", code2], capture_output=True, text=True, check=True).stdout
    assert "'numpy'" not in out2 and out2.strip().endswith("1")
