"""A git revision checked out beside this tree, for the benchmarks that compare two revisions in one run
(``--against REV`` of windowstore_bench, window_types_bench and task_batch_bench; ``tree=REV`` of batch_phases)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def revision_tree(rev: str, prefix: str = "bench-") -> Iterator[Path]:
    """A temporary detached git worktree of ``rev`` (its root), removed - worktree and folder - on exit."""
    parent = Path(tempfile.mkdtemp(prefix=prefix))
    tree = parent / "tree"
    made = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], capture_output=True, text=True
    )
    if made.returncode != 0:
        shutil.rmtree(parent, ignore_errors=True)
        raise SystemExit(f"cannot check out {rev!r}: {made.stderr.strip()}")
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(parent, ignore_errors=True)
