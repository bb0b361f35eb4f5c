"""What the service checks of its checkpoint folder at start, each a one-line refusal instead of a traceback later:

* can this process write it (:func:`checkpoint_dir_problem`)? A host folder bind-mounted into the container, owned
  by root, while the service runs as uid 10001, would otherwise fail deep inside the first write;
* was its state written with the same window definition (:func:`checkpoint_window_problem`)? The checkpoint's
  :data:`LAYOUT_FILE` records the window type and sizes; windows of another definition cannot continue it.

It also reads what the checkpoint was created with and the query must keep: the number of state partitions Spark
froze into it (:func:`checkpoint_state_partitions`) and whether the state key has the task ``slot``
(:func:`checkpoint_balance_tasks`). The layout file holds what a checkpoint was created with and must keep
(:func:`read_layout` / :func:`record_layout`). And a checkpoint written before the processor moved to pyspark's Row
interface gets the operator name Spark now expects (:func:`migrate_operator_name`)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "LAYOUT_FILE",
    "checkpoint_balance_tasks",
    "checkpoint_dir_problem",
    "checkpoint_state_partitions",
    "checkpoint_window_problem",
    "has_batches",
    "migrate_operator_name",
    "OPERATOR_RENAMED",
    "read_layout",
    "record_layout",
]

#: what a checkpoint was created with, as JSON in the checkpoint folder: ``balance_tasks``, ``window``
LAYOUT_FILE = "slidingwindow-layout.json"

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
    path = _local(checkpoint_dir)
    if path is None:
        return None
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


def _local(checkpoint_dir: str) -> Path | None:
    """The folder of a checkpoint on the local file system, ``None`` for a remote URI (not checked here)."""
    if "://" in checkpoint_dir and not checkpoint_dir.startswith("file:"):
        return None
    return Path(checkpoint_dir.removeprefix("file://").removeprefix("file:"))


def read_layout(checkpoint_dir: Path) -> dict[str, Any]:
    """The checkpoint's recorded layout (empty when nothing is recorded)."""
    marker = checkpoint_dir / LAYOUT_FILE
    return json.loads(marker.read_text()) if marker.exists() else {}


def record_layout(checkpoint_dir: Path, **entries: Any) -> None:
    """Add ``entries`` to the checkpoint's layout, keeping what is recorded already under other names."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    layout = {**read_layout(checkpoint_dir), **entries}
    (checkpoint_dir / LAYOUT_FILE).write_text(json.dumps(layout, sort_keys=True))


def has_batches(checkpoint_dir: Path) -> bool:
    """Whether the checkpoint has started a micro-batch (state may exist)."""
    return any((checkpoint_dir / "offsets").glob("[0-9]*"))


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


def checkpoint_balance_tasks(checkpoint_dir: str, balance_tasks: bool) -> bool:
    """Whether the query's state key has the ``slot`` (:func:`service.spark.job.task_slot`): what the checkpoint
    was created with (recorded in :data:`LAYOUT_FILE`; a checkpoint with batches but no record predates the slot:
    no slot), else ``balance_tasks``, recorded now. A checkpoint on a remote file system (``scheme://``) takes the
    setting."""
    if "://" in checkpoint_dir:
        return balance_tasks
    root = Path(checkpoint_dir)
    layout = read_layout(root)
    if "balance_tasks" in layout:
        recorded = bool(layout["balance_tasks"])
    elif has_batches(root):
        recorded = False
    else:
        record_layout(root, balance_tasks=balance_tasks)
        return balance_tasks
    if recorded != balance_tasks:
        logger.warning(
            "balance_tasks=%s ignored: the checkpoint %s was created with %s", balance_tasks, checkpoint_dir, recorded
        )
    return recorded


def checkpoint_window_problem(checkpoint_dir: str, window: dict[str, Any], describe: Any = str) -> str | None:
    """``None`` when this run's window definition ``window`` (``WindowDefinition.identity()``) may use the
    checkpoint - recording it there when none is recorded or no batch has run yet - else one line naming both
    definitions. A checkpoint with batches but no record was written before window types existed: sliding
    windows (of a time difference not recorded, so any is accepted, then recorded). ``describe`` phrases an
    identity. A remote checkpoint (``scheme://``) is not checked."""
    root = _local(checkpoint_dir)
    if root is None:
        return None
    recorded = read_layout(root).get("window")
    if recorded is None and has_batches(root):
        recorded = {"type": "sliding"}
        if window.get("type") == "sliding":
            recorded = None  # the sizes were not recorded: take this run's
    if recorded is not None and recorded != window and has_batches(root):
        return (
            f"the checkpoint {root} holds state of {describe(recorded)} windows; this run asks for "
            f"{describe(window)} windows, which cannot continue it: use a new checkpoint_dir, or the window "
            "settings it was written with"
        )
    if recorded != window:
        record_layout(root, window=window)
    return None


#: the stateful operator's name in a checkpoint's state metadata: written by the service before 2026-11-28 (pyspark's
#: pandas interface, ``transformWithStateInPandas``) -> now (its Row interface, ``transformWithState``)
OPERATOR_RENAMED = ("transformWithStateInPandasExec", "transformWithStateInPySparkExec")


def migrate_operator_name(checkpoint_dir: str) -> int:
    """Record the checkpoint's stateful operator under the name the service's query now has; returns how many state
    metadata files were rewritten (0: nothing to do, or a remote checkpoint, which is not touched).

    Spark records each stateful operator's name in the state metadata (``state/<operator>/_metadata/``, one JSON
    file per batch that wrote it: ``"operatorInfo": {"operatorName": ...}``) and refuses to continue a checkpoint
    whose operator name differs (``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``). The service's
    processor ran under pyspark's pandas interface until 2026-11-28 and runs under its Row interface since: one
    Spark operator (``TransformWithStateInPySparkExec``) under two names (:data:`OPERATOR_RENAMED`), with the same
    state variables, schemas and store. So the old name is replaced in each metadata file: the new text is written
    next to it and renamed over it, and Hadoop's checksum of the old text (``.<name>.crc``) is removed (Hadoop
    reads a file without one unchecked; Spark writes one with its next metadata file)."""
    root = _local(checkpoint_dir)
    if root is None or not (root / "state").is_dir():
        return 0
    old, new = OPERATOR_RENAMED
    rewritten = 0
    for path in sorted((root / "state").glob("*/_metadata/**/*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        text = path.read_text()
        version, _, body = text.partition("\n")
        try:
            metadata = json.loads(body)
        except ValueError:
            continue
        info = metadata.get("operatorInfo") if isinstance(metadata, dict) else None
        if not isinstance(info, dict) or info.get("operatorName") != old:
            continue
        info["operatorName"] = new
        fresh = path.with_name(f".{path.name}.slidingwindow-tmp")
        fresh.write_text(f"{version}\n{json.dumps(metadata, separators=(',', ':'))}")
        os.replace(fresh, path)
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
        rewritten += 1
    if rewritten:
        logger.info(
            "checkpoint %s: its stateful operator was recorded as %s (the service before 2026-11-28); recorded it as "
            "%s, the name of the same operator under the Row interface the service runs now (%d state metadata "
            "files)",
            root,
            old,
            new,
            rewritten,
        )
    return rewritten
