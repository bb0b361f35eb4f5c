"""Spark's block-manager thread pools bounded (service.spark.thread_pools), in a real local SparkSession."""

from __future__ import annotations

import time

from service.spark import thread_pools

_PREFIXES = ("block-manager-ask-thread-pool", "block-manager-storage-async-thread-pool")


def _pool_threads(jvm) -> dict[str, int]:
    names = [t.getName() for t in jvm.java.lang.Thread.getAllStackTraces().keySet()]
    return {p: sum(1 for n in names if n.startswith(p)) for p in _PREFIXES}


def test_the_pools_run_at_most_a_few_threads_and_still_remove_broadcasts(spark):
    sc = spark.sparkContext
    jvm = sc._jvm
    for pool in thread_pools.block_manager_pools(jvm):  # Spark's sizes, whatever ran in this session before
        pool.setMaximumPoolSize(100)
        pool.setCorePoolSize(100)
    for i in range(30):  # Spark's pools as they are: a new thread for each removal, up to 100
        sc.broadcast([i]).destroy()
    grown = _pool_threads(jvm)
    assert min(grown.values()) > thread_pools.THREADS, grown
    assert thread_pools.bound_block_manager_pools(jvm) == 2  # the driver's master endpoint and its storage endpoint
    pools = thread_pools.block_manager_pools(jvm)
    assert [p.getMaximumPoolSize() for p in pools] == [thread_pools.THREADS] * 2
    done = [p.getCompletedTaskCount() for p in pools]
    for i in range(60):  # each destroy() waits for the broadcast's removal, which runs in both pools
        sc.broadcast([i] * 10).destroy()
    assert all(p.getCompletedTaskCount() - d >= 60 for p, d in zip(pools, done, strict=True))
    deadline = time.monotonic() + 10
    while max((counts := _pool_threads(jvm)).values()) > thread_pools.THREADS:
        assert time.monotonic() < deadline, counts  # threads of a pool that grew before the call end when idle
        time.sleep(0.2)
    assert all(0 < n <= thread_pools.THREADS for n in counts.values()), counts


def test_a_spark_without_the_expected_structure_is_one_warning_and_nothing_changed(caplog):
    class NoSpark:
        def __getattr__(self, name):
            raise RuntimeError(f"no {name} here")

    assert thread_pools.bound_block_manager_pools(NoSpark()) == 0
    assert "left at their size" in caplog.text
