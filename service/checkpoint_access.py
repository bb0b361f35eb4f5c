"""The checkpoint folder, read and checked on the driver before Spark starts the query:

* can this process write it (:func:`checkpoint_dir_problem`)? Asked once at start, so that a folder it cannot
  write (a host folder bind-mounted into the container, owned by root, while the service runs as uid 10001) stops
  the service with one line saying what to do, instead of a ``PermissionError`` traceback from deep inside the
  first write;
* what layout was it created with: the number of state partitions Spark froze into it
  (:func:`checkpoint_state_partitions`) and whether the state key has the task ``slot``
  (:func:`checkpoint_balance_tasks`, recorded in :data:`LAYOUT_FILE`), which :mod:`service.spark.job` keeps.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

__all__ = ["LAYOUT_FILE", "checkpoint_dir_problem", "checkpoint_state_partitions", "checkpoint_balance_tasks"]

logger = logging.getLogger(__name__)


def _owner(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return "unknown owner"
    return f"owner uid {st.st_uid}, mode {st.st_mode & 0o7777:04o}"


def checkpoint_dir_problem(checkpoint_dir: str) -> str | None:
    """``None`` if ``checkpoint_dir`` exists (or can be created) and this process can create files in it; otherwise
    one line naming the folder, who owns it, who we are, and the two ways out. Remote URIs (``hdfs://``, ``s3a://``)
    are not checked here (Spark reports their errors)."""
    if "://" in checkpoint_dir and not checkpoint_dir.startswith("file:"):
        return None
    path = Path(checkpoint_dir.removeprefix("file://").removeprefix("file:"))
    uid = os.getuid() if hasattr(os, "getuid") else -1
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".slidingwindow-write-check-"):
            pass
    except OSError as e:
        where = path if path.exists() else next((p for p in path.parents if p.exists()), path)
        return (
            f"the checkpoint folder {path} is not writable by this process (uid {uid}; {where}: {_owner(where)}; "
            f"{e.strerror or e}): make it writable for uid {uid} (e.g. chown -R {uid} on the host folder) or "
            f"run as its owner (docker run --user), setting checkpoint_dir / SLIDINGWINDOW_CHECKPOINT_DIR"
        )
    return None


def checkpoint_state_partitions(checkpoint_dir: str) -> int | None:
    """``spark.sql.shuffle.partitions`` frozen into an existing checkpoint (Spark keeps it over the setting)."""
    offsets = Path(checkpoint_dir) / "offsets"
    batches = (
        sorted((p for p in offsets.glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
        if offsets.is_dir()
        else []
    )
    for path in reversed(batches):
        for line in path.read_text().splitlines():
            if line.startswith("{") and '"conf"' in line:
                value = json.loads(line).get("conf", {}).get("spark.sql.shuffle.partitions")
                if value is not None:
                    return int(value)
    return None


#: the file in the checkpoint folder that records the state key's layout (``{"balance_tasks": ...}``)
LAYOUT_FILE = "slidingwindow-layout.json"


def checkpoint_balance_tasks(checkpoint_dir: str, balance_tasks: bool) -> bool:
    """Whether the query's state key has the ``slot`` (:func:`service.spark.job.task_slot`): what the checkpoint
    was created with (recorded in :data:`LAYOUT_FILE`; a checkpoint with batches but no such file predates the
    slot: no slot), else ``balance_tasks``, recorded now. A checkpoint on a remote file system (``scheme://``)
    takes the setting."""
    if "://" in checkpoint_dir:
        return balance_tasks
    root = Path(checkpoint_dir)
    marker = root / LAYOUT_FILE
    if marker.exists():
        recorded = bool(json.loads(marker.read_text())["balance_tasks"])
    elif any((root / "offsets").glob("[0-9]*")):
        recorded = False
    else:
        root.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"balance_tasks": balance_tasks}))
        return balance_tasks
    if recorded != balance_tasks:
        logger.warning(
            "balance_tasks=%s ignored: the checkpoint %s was created with %s", balance_tasks, checkpoint_dir, recorded
        )
    return recorded
