"""The service's state between micro-batches, in memory, for the task-processor tests of every window type: the
last task meta and one blob per key, written as ``service.task.batch`` writes a snapshot (the dirty keys' blobs,
then the meta), and every key a restored processor read (``loads``)."""

from __future__ import annotations

from collections.abc import Hashable

from windowstore import TaskProcessor


class ExternalState:
    def __init__(self) -> None:
        self.meta: bytes | None = None
        self.blobs: dict[Hashable, bytes] = {}
        self.loads: list[Hashable] = []

    def save(self, proc: TaskProcessor) -> None:
        """A snapshot of ``proc``: its changed keys' blobs (``None``: the key holds nothing any more), then its meta."""
        for key, blob in proc.export_keys(proc.dirty_keys()).items():
            if blob is None:
                self.blobs.pop(key, None)
            else:
                self.blobs[key] = blob
        proc.clear_dirty_keys()
        self.meta = proc.export_meta()

    def load(self, key: Hashable) -> bytes | None:
        """The key loader handed to ``from_state``: the key's blob, ``None`` when it has none."""
        self.loads.append(key)
        return self.blobs.get(key)
