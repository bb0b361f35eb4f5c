"""State log entries shared between the Python workers of one machine, through local files.

Spark hands a task to whichever Python worker is idle, so two workers take turns at a task's batches, and a
worker whose cached processor is behind must replay the log entries it missed before it can start (see
:class:`service.task.state.TaskState`). That replay sits on the batch's critical path. Here every task batch
also leaves its log entry in a local directory, named by the token it applies to; an idle worker replays the
entries that follow its cached processors' tokens (``service.worker.catch_up.spool_catch_up``), so it is usually
up to date when the task comes back to it.

The files are only a shortcut: the committed state and its log in Spark's state store stay the truth. An
entry is used only when its token chain continues a cached processor's token exactly (an entry of a batch
that failed and was retried leads to a token the state never commits, and the worker then restores from the
store as before). On a cluster, workers on other machines do not see the files and catch up from the store.

Layout::

    <tmp>/slidingwindow-spool/<spool id>/<topic>-<partition>/<token applied to>   new token, "\\n", log entry
    <tmp>/slidingwindow-spool/<spool id>/<topic>-<partition>/@new                 the same, of the task's first batch

A task's first batch (it created the task: its state is exactly what its records made) leaves its records as
the entry ``@new``, so an idle worker that has never run the task builds its processor from nothing and follows
the chain from there, instead of restoring it from the store the first time Spark hands it the task.

Files older than :data:`KEEP_SECONDS` are removed by the next write to the same directory; the first write of a
worker process also removes the old files and empty directories of other queries (other checkpoints).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from pathlib import Path

__all__ = ["KEEP_SECONDS", "NEW_TASK", "spool_id", "spool_dir", "tasks", "put", "get"]

logger = logging.getLogger(__name__)

#: how long an entry stays: a worker further behind than this catches up from the state store. Entries are
#: tens to hundreds of KB per task batch (zstd-compressed records), so this bounds the spool to roughly a
#: minute of input per machine
KEEP_SECONDS = 60.0

_warned = False
_swept: set[str] = set()


def spool_id(checkpoint_dir: str) -> str:
    """The spool id of a query: from its checkpoint directory (one running query per checkpoint)."""
    return hashlib.sha256(os.path.abspath(checkpoint_dir).encode()).hexdigest()[:16]


def spool_dir(spool_id: str, topic: str, partition: int) -> Path:
    """The directory of one task's entries (Kafka topic names are safe in a path: ``[a-zA-Z0-9._-]``)."""
    return _query_dir(spool_id) / f"{topic}-{partition}"


def _query_dir(spool_id: str) -> Path:
    return Path(tempfile.gettempdir()) / "slidingwindow-spool" / spool_id


def _prune(d: Path, cutoff: float) -> None:
    """Remove the files of ``d`` last written before ``cutoff`` (another worker may be doing the same)."""
    with os.scandir(d) as it:
        for e in it:
            try:
                if e.stat().st_mtime < cutoff:
                    os.unlink(e.path)
            except FileNotFoundError:
                pass


def _subdirs(d: Path) -> list[Path]:
    """The directories in ``d``; none when ``d`` is gone (another worker's sweep removed it meanwhile)."""
    try:
        return [p for p in d.iterdir() if p.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _sweep(root: Path, cutoff: float) -> None:
    """Old entries and empty directories of every query under ``root`` (once per worker process). Other
    workers may be sweeping at the same time: whatever vanishes meanwhile is skipped."""
    for query in _subdirs(root):
        for task in _subdirs(query):
            try:
                _prune(task, cutoff)
                task.rmdir()  # only when empty
            except OSError:
                pass
        try:
            query.rmdir()
        except OSError:
            pass


#: the file name of a task's first entry (applied to no state: the batch that created the task)
NEW_TASK = "@new"


def _name(token: str) -> str:
    return token.replace("/", "~") if token else NEW_TASK


def tasks(spool_id: str) -> list[tuple[str, int]]:
    """The ``(topic, partition)`` of every task of the query that has entries here."""
    try:
        names = os.listdir(_query_dir(spool_id))
    except OSError:
        return []
    out = []
    for name in names:
        topic, sep, partition = name.rpartition("-")
        if sep and partition.isdigit():
            out.append((topic, int(partition)))
    return out


def put(spool_id: str, topic: str, partition: int, applied_to: str, new_token: str, entry: bytes) -> bool:
    """Leave a log entry (applied to ``applied_to``, giving ``new_token``) for the other workers; False when the
    file could not be written (logged once per process: the entry is only a shortcut)."""
    global _warned
    d = spool_dir(spool_id, topic, partition)
    try:
        name = _name(applied_to)
        tmp = d / f".{name}.{os.getpid()}"
        for attempt in (1, 2):
            d.mkdir(parents=True, exist_ok=True)
            try:
                tmp.write_bytes(new_token.encode() + b"\n" + entry)
                os.replace(tmp, d / name)  # atomic: a reader sees the whole entry or none
                break
            except FileNotFoundError:
                if attempt == 2:  # another worker's sweep removed the (then empty) directory twice
                    raise
    except OSError as e:
        if not _warned:
            _warned = True
            logger.warning(
                "cannot share state log entries through %s (%s); workers catch up from the state store instead", d, e
            )
        return False
    # the entry is in place; removing old ones is housekeeping, and its failures are not the entry's
    cutoff = time.time() - KEEP_SECONDS
    try:
        if spool_id not in _swept:
            _swept.add(spool_id)
            _sweep(d.parent.parent, cutoff)
        else:
            _prune(d, cutoff)
    except OSError as e:
        logger.debug("spool cleanup under %s: %s", d.parent.parent, e)
    return True


def get(spool_id: str, topic: str, partition: int, token: str) -> tuple[str, bytes] | None:
    """The entry that applies to ``token``: ``(new token, log entry)``, or ``None`` when there is none."""
    try:
        data = (spool_dir(spool_id, topic, partition) / _name(token)).read_bytes()
    except OSError:
        return None
    new_token, sep, entry = data.partition(b"\n")
    return (new_token.decode(), entry) if sep else None
