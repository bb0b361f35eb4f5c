"""Spark's block-manager thread pools, bounded to a few threads each.

Spark removes a micro-batch's broadcast variables (every stage's task binary is one), shuffles and RDD blocks
once they are garbage, through two thread pools of the block manager: ``block-manager-ask-thread-pool`` (the
driver's ``BlockManagerMasterEndpoint``) and ``block-manager-storage-async-thread-pool`` (each block manager's
``BlockManagerStorageEndpoint``). Both are Spark's ``ThreadUtils.newDaemonCachedThreadPool(prefix, 100)``: a
``ThreadPoolExecutor`` whose *core* size is 100, over an unbounded queue, with idle threads ending after 60 s.
Below its core size a ``ThreadPoolExecutor`` starts a new thread for every task it is given, idle threads or
not; and as the idle threads take turns at the queue, each one gets a task well within 60 s and none ends::

    seconds into a run   0     28 (bench/side_by_side.py)      later
    threads per pool     0    100                              100, for good

That was 200 of the driver JVM's 295 threads, each with its stack and the JVM's own per-thread structures.
:func:`bound_block_manager_pools` sets the core and the maximum size of every such pool of the driver JVM's
endpoints to :data:`THREADS`: a pool then never runs more threads than that (tasks beyond them wait in its
queue), and threads above it, in a pool that grew before the call, end as soon as they are idle (with the core
size alone they would end only after 60 s without a task). What runs in these pools is a block's removal or a
callback combining the storage endpoints' replies; none of it waits for another task of its pool (the caller,
``BlockManagerMaster``, does the waiting), so a few threads keep up with what a query frees
(``tests/service/test_thread_pools.py`` runs removals through the bounded pools).

The pools are private fields of Spark's endpoints, reached through the RPC environment's dispatcher by
reflection (``getDeclaredField``). Where Spark's structure is another (another Spark version) nothing is changed
and one warning says so: the pools only cost memory. With a cluster master the driver's pools are bounded, the
executors' (in their own JVMs) are not.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["THREADS", "block_manager_pools", "bound_block_manager_pools"]

logger = logging.getLogger(__name__)

#: the core size (and so the most threads) of each bounded pool
THREADS = 4

#: the endpoint classes whose thread pools are bounded
_ENDPOINTS = (
    "org.apache.spark.storage.BlockManagerMasterEndpoint",
    "org.apache.spark.storage.BlockManagerStorageEndpoint",
)


def _field(jvm: Any, class_name: str, obj: Any, name: str) -> Any:
    """Field ``name`` (private or not) of ``obj``, an instance of ``class_name``, read by reflection.

    Through the field's ``Class``, not a method of ``obj``: py4j looks up a method by listing all of its class's
    public methods, and some of Spark's classes (``SparkEnv``) have methods whose signatures name classes that
    are not on the class path (protobuf's), which makes that listing fail."""
    field = jvm.java.lang.Class.forName(class_name).getDeclaredField(name)
    field.setAccessible(True)
    return field.get(obj)


def block_manager_pools(jvm: Any) -> list[Any]:
    """The ``ThreadPoolExecutor`` fields of the driver JVM's block-manager endpoints (py4j objects), found by
    reflection (see the module's docstring); raises py4j's errors where Spark's structure is another.

    ``jvm`` is py4j's view of the driver JVM (``gateway.jvm``), once the SparkContext exists."""
    context = jvm.org.apache.spark.SparkContext.getOrCreate()
    env = _field(jvm, "org.apache.spark.SparkContext", context, "_env")
    rpc_env = _field(jvm, "org.apache.spark.SparkEnv", env, "rpcEnv")
    dispatcher = _field(jvm, "org.apache.spark.rpc.netty.NettyRpcEnv", rpc_env, "dispatcher")
    endpoints = list(_field(jvm, "org.apache.spark.rpc.netty.Dispatcher", dispatcher, "endpointRefs").keySet())
    pool_class = jvm.java.lang.Class.forName("java.util.concurrent.ThreadPoolExecutor")
    pools = []
    for name in _ENDPOINTS:
        cls = jvm.java.lang.Class.forName(name)
        for endpoint in (e for e in endpoints if cls.isInstance(e)):
            for field in cls.getDeclaredFields():
                if pool_class.isAssignableFrom(field.getType()):
                    field.setAccessible(True)
                    if (pool := field.get(endpoint)) is not None:
                        pools.append(pool)
    return pools


def bound_block_manager_pools(jvm: Any, threads: int = THREADS) -> int:
    """Bound the thread pools of the driver JVM's block-manager endpoints (:func:`block_manager_pools`) to
    ``threads`` threads each; returns how many were bounded (0, with one warning, where Spark's structure is not
    the expected one: nothing is changed then)."""
    try:
        pools = block_manager_pools(jvm)
        for pool in pools:
            if pool.getCorePoolSize() > threads:  # the core size first: it may not exceed the maximum
                pool.setCorePoolSize(threads)
            pool.setMaximumPoolSize(threads)
    except Exception as e:  # py4j raises its own errors for a missing field or class
        logger.warning("Spark's block-manager thread pools left at their size (%s)", str(e).splitlines()[0])
        return 0
    if not pools:
        logger.warning("Spark's block-manager thread pools not found: left at their size")
    return len(pools)
