"""Task owners: a task's micro-batches run in the Python worker that holds its processor.

Spark hands a stateful task to whichever Python worker of the executor is idle, so on 2 cores two workers take
turns at a task's batches, and a worker whose cached processor is behind has to replay the batches it missed
(from the state store's log): the window engine's work done twice. With owners, the worker that ran a task's
batch keeps the task (it *owns* it: it listens on a local socket named after the task). A worker that Spark
hands someone else's task forwards the batch to the owner and waits; the owner's socket thread runs the batch
against the forwarding worker's state store handles, through the socket (the handles only work in the worker
Spark gave the task), and returns the batch's result::

    forwarding worker (Spark's task)                   owner (socket thread, under its worker lock)
    ------------------------------------------------   ------------------------------------------------
    run(task) --- ("run", records, tasks it owns) ---> run the batch: cached processor, produce, ...
              <-- ("call", "get_task", ()) ----------- state.get_task()
    state.get_task() -- ("ok", (meta, token, n)) ---->
              <-- ("call", "put_bucket", (b, data)) -- state.put_bucket(b, data) ...
              <-- ("done", output) -------------------
    return output (stats; the rows too with sink=spark)

While a worker waits for an owner, its own socket threads are free to run the tasks it owns, so two workers
that were handed each other's tasks both work. The owner's cache entry is still checked against the token in
the store, so a forwarded batch is exactly what a local batch would have been; ownership only decides where
the work happens.

* No owner (a new task, a restart, or the owner's process is gone: connecting fails): the worker runs the
  batch itself and becomes the owner.
* A busy owner that owns at least two tasks more than the forwarding worker gives the task up (it closes the
  task's socket and drops its processor): the forwarding worker runs the batch from the store and becomes
  the owner. Ownership spreads over the workers that Spark keeps busy, then stays.
* The connection fails after the owner wrote state: the batch fails (Spark retries it; state writes of a
  failed task are discarded). Before any write: the worker runs the batch itself.
* The owner's batch raises: the forwarding worker raises with its message (as a local batch would have).

Sockets are Linux abstract-namespace Unix sockets named after a hash of the query's random owners key, topic
and partition, so only the workers of one running query on one machine meet, and a dead owner's name is
free again at once. Every connection is authenticated with that key (``multiprocessing.connection``: HMAC
challenge) before any pickle is read. On another OS, or on a cluster's other machines, tasks simply run
where Spark puts them.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from service.task.config import TaskConfig
from service.task.runner import TaskBatch, TaskOutput
from service.task.state import TaskState
from service.worker.cache import drop_cached, worker_busy

__all__ = ["SUPPORTED", "RunBatch", "run", "address", "owned", "release_all"]

logger = logging.getLogger(__name__)

#: abstract Unix socket names are a Linux feature
SUPPORTED = sys.platform.startswith("linux")

#: runs one task batch in this worker (:func:`service.worker.run.run_batch`)
RunBatch = Callable[[TaskConfig, TaskState, TaskBatch], TaskOutput]

_WRITES = frozenset({"set_task", "put_bucket", "delete_bucket"})
_CALLS = _WRITES | {"get_task", "get_bucket"}

#: give a task up to a forwarding worker when this worker owns at least this many more tasks than it
STEAL_MARGIN = 2

_lock = threading.Lock()
#: the tasks this worker owns: address -> (listener, config, topic, partition, run function)
_owned: dict[str, tuple[Listener, TaskConfig, str, int, RunBatch]] = {}


def address(config: TaskConfig, topic: str, partition: int) -> str:
    """The abstract socket name of a task's owner (``config.owners`` is the query's random key)."""
    digest = hashlib.sha256(f"{config.owners}\0{topic}\0{partition}".encode()).hexdigest()[:32]
    return f"\0slidingwindow-task-{digest}"


def owned(config: TaskConfig) -> int:
    """How many tasks of ``config``'s query this worker owns."""
    with _lock:
        return _count(config)


def _count(config: TaskConfig) -> int:  # the caller holds _lock
    return sum(1 for _l, c, *_x in _owned.values() if c == config)


def run(fn: RunBatch, config: TaskConfig, state: TaskState, batch: TaskBatch) -> tuple[TaskOutput, bool]:
    """Run a task batch where its processor is: here when this worker owns the task (or nobody does: then this
    worker becomes its owner), else in the owner's worker. Returns the output and whether it was forwarded.
    Without owners (``config.owners`` empty, or not Linux) the batch simply runs here."""
    if not SUPPORTED or not config.owners:
        return fn(config, state, batch), False
    addr = address(config, batch.topic, batch.partition)
    with _lock:
        mine = addr in _owned
    if not mine:
        out = _forward(addr, config, state, batch)
        if out is not None:
            return out, True
    out = fn(config, state, batch)
    if not mine:
        _claim(addr, config, batch.topic, batch.partition, fn)
    return out, False


def release_all() -> None:
    """Close every task socket of this worker (tests; a worker process need not)."""
    with _lock:
        items = list(_owned.items())
        _owned.clear()
    for _addr, (listener, config, topic, partition, _fn) in items:
        _close(listener)
        drop_cached(config, topic, partition)


# ------------------------------------------------------------------------------------------ forwarding side
def _forward(addr: str, config: TaskConfig, state: TaskState, batch: TaskBatch) -> TaskOutput | None:
    """The owner's output for the batch, or None when this worker is to run it itself."""
    task = batch.task
    try:
        conn = Client(addr, family="AF_UNIX", authkey=config.owners.encode())
    except (OSError, EOFError):  # nobody listens: no owner, or it is gone
        return None
    except Exception:  # e.g. an authentication failure: not our query's owner
        logger.warning(
            "the owner socket of %s did not accept this worker; running the batch here",
            task,
            exc_info=True,
        )
        return None
    wrote = False
    with conn:
        try:
            conn.send(("run", batch, owned(config)))
            while True:
                msg = conn.recv()
                kind = msg[0]
                if kind == "call":
                    name, args = msg[1], msg[2]
                    if name not in _CALLS:
                        raise RuntimeError(f"the owner of {task} asked for an unknown state call {name!r}")
                    wrote = wrote or name in _WRITES
                    try:
                        result = getattr(state, name)(*args)
                    except Exception as e:
                        conn.send(("err", f"{type(e).__name__}: {e}"))
                        raise
                    conn.send(("ok", result))
                elif kind == "done":
                    return msg[1]
                elif kind == "local":
                    return None
                elif kind == "fail":
                    raise RuntimeError(f"task {task} failed in the Python worker that owns it:\n{msg[1]}")
                else:
                    raise RuntimeError(f"unexpected message {kind!r} from the owner of {task}")
        except (OSError, EOFError) as e:
            if wrote:
                raise RuntimeError(
                    f"lost the owner of {task} after it wrote state; the batch fails and Spark retries it"
                ) from e
            logger.warning("lost the owner of %s before it wrote state (%s); running the batch here", task, e)
            return None


# ------------------------------------------------------------------------------------------------ owner side
def _claim(addr: str, config: TaskConfig, topic: str, partition: int, fn: RunBatch) -> None:
    try:
        listener = Listener(addr, family="AF_UNIX", authkey=config.owners.encode())
    except OSError as e:  # taken meanwhile: that worker owns it
        logger.debug("not claiming %s-%d: %s", topic, partition, e)
        return
    with _lock:
        _owned[addr] = (listener, config, topic, partition, fn)
        # a worker outlives queries (tests run many in one session): it keeps at most as many tasks as it caches
        evicted = [_owned.pop(a) for a in list(_owned)[: max(len(_owned) - config.state_cache_tasks, 0)]]
    for old, *_rest in evicted:
        _close(old)
    threading.Thread(
        target=_serve, args=(addr, listener), name=f"slidingwindow-owner-{topic}-{partition}", daemon=True
    ).start()


def _serve(addr: str, listener: Listener) -> None:
    """Accept the forwarding workers of one task, one connection at a time, until the task is given up."""
    while True:
        try:
            conn = listener.accept()
        except Exception:  # closed (given up), or a peer that failed authentication
            with _lock:
                if _owned.get(addr, (None,))[0] is not listener:
                    return
            logger.debug("a connection to %r was refused", addr, exc_info=True)
            continue
        with conn:
            try:
                _handle(addr, listener, conn)
            except (OSError, EOFError):
                logger.warning("the worker that forwarded a batch went away", exc_info=True)


def _handle(addr: str, listener: Listener, conn: Connection) -> None:
    kind, batch, theirs = conn.recv()
    if kind != "run":
        return
    with _lock:
        entry = _owned.get(addr)
        mine = _count(entry[1]) if entry is not None else 0
        give_up = entry is not None and worker_busy() and mine >= theirs + STEAL_MARGIN
        if give_up:
            del _owned[addr]
    if entry is None or give_up:
        if give_up and entry is not None:  # (give_up implies an entry)
            _close(listener)
            drop_cached(entry[1], entry[2], entry[3])
            logger.info(
                "gave task %s-%d to a less busy worker (%d tasks here, %d there)", entry[2], entry[3], mine, theirs
            )
        conn.send(("local",))
        return
    _listener, config, _topic, _partition, fn = entry
    try:
        out = fn(config, _RemoteState(conn), batch)
    except _PeerGone:
        raise
    except Exception:  # reported to the forwarding worker, which fails its task with it
        conn.send(("fail", traceback.format_exc()))
        return
    conn.send(("done", _portable(out, config)))


def _portable(out: TaskOutput, config: TaskConfig) -> TaskOutput:
    """What travels back: the stats, and the rows unless this worker produced them (sink=direct)."""
    if config.sink == "direct":
        return TaskOutput(stats=out.stats)
    return replace(out, decoded=None)


def _close(listener: Listener) -> None:
    try:
        listener.close()
    except OSError:
        pass


class _PeerGone(OSError):
    """The forwarding worker went away in the middle of a batch."""


class _RemoteState(TaskState):
    """The forwarding worker's :class:`TaskState`, called through the connection."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def _call(self, name: str, *args: Any) -> Any:
        try:
            self._conn.send(("call", name, args))
            kind, result = self._conn.recv()
        except (OSError, EOFError) as e:
            raise _PeerGone(f"the forwarding worker went away during {name}") from e
        if kind != "ok":
            raise RuntimeError(f"state call {name} failed in the forwarding worker: {result}")
        return result

    def get_task(self) -> tuple[bytes, str, int] | None:
        return self._call("get_task")

    def set_task(self, meta: bytes, token: str, buckets: int) -> None:
        self._call("set_task", meta, token, buckets)

    def get_bucket(self, bucket: int) -> bytes | None:
        return self._call("get_bucket", bucket)

    def put_bucket(self, bucket: int, data: bytes) -> None:
        self._call("put_bucket", bucket, data)

    def delete_bucket(self, bucket: int) -> None:
        self._call("delete_bucket", bucket)
