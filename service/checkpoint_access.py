"""Can this process write its checkpoint folder? Asked once at start, so that a folder it cannot write (a host
folder bind-mounted into the container, owned by root, while the service runs as uid 10001) stops the service with
one line saying what to do, instead of a ``PermissionError`` traceback from deep inside the first write."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["checkpoint_dir_problem"]


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
