"""A running HotSpot JVM's own counters (its ``hsperfdata`` file), read without starting another JVM.

``jcmd PID PerfCounter.print`` and ``jstat`` print the same counters but start a JVM each (~0.5 CPU-second),
which a start-up measurement cannot afford; the JVM publishes them in a memory-mapped file,
``/tmp/hsperfdata_<user>/<pid>`` (``-XX:+UsePerfData``, on by default), whose layout is HotSpot's
``PerfDataPrologue`` and ``PerfDataEntry`` (``perfMemory.hpp``)::

    prologue  magic 0xcafec0c0 | byte order (1: little) | major | minor | accessible | used | overflow
              | mod time (8 bytes) | entry offset (4) | entries (4)
    entry     length (4) | name offset (4) | vector length (4) | type | flags | units | variability
              | data offset (4) ... name (NUL-terminated) ... data

:func:`class_loading` turns the class-loading counters into seconds (``sun.os.hrt.frequency`` ticks per
second). They are *elapsed* times the JVM measures around each step, not CPU time: on a busy machine they include
waiting for a core. Each step's ``.self`` counter leaves out the class loading nested in it (a static initializer
that loads another class), so the steps' times do not overlap and add up. ``java.cls.loadedClasses`` counts only
the classes parsed from class files; those mapped from a class-data archive are ``sharedLoadedClasses``. Used by
``bench/recovery_bench.py``.
"""

from __future__ import annotations

import getpass
import struct
from pathlib import Path

__all__ = ["CLASS_LOADING", "class_loading", "counters_of", "read_counters"]

_MAGIC = 0xCAFEC0C0
_TYPE_LONG = ord("J")

#: the figures of :func:`class_loading`: label -> the counters it sums; a label ending in "(s)" is a time (ticks,
#: exclusive of nested steps), any other a count
CLASS_LOADING: dict[str, tuple[str, ...]] = {
    "classes loaded": ("java.cls.loadedClasses", "java.cls.sharedLoadedClasses"),
    "of them from a class-data archive": ("java.cls.sharedLoadedClasses",),
    "app class loaders' own work (s)": ("sun.cls.appClassLoadTime.self",),
    "defining classes (s)": ("sun.cls.defineAppClassTime.self",),
    "linking (s)": ("sun.cls.classLinkedTime.self",),
    "verifying (s)": ("sun.cls.classVerifyTime.self",),
    "static initializers (s)": ("sun.cls.classInitTime.self",),
    "collections (s)": ("sun.gc.collector.0.time", "sun.gc.collector.1.time"),
    "safepoints (s)": ("sun.rt.safepointTime",),
}


def read_counters(data: bytes) -> dict[str, int]:
    """The ``long`` scalar counters of an hsperfdata image (byte arrays and strings are left out)."""
    if len(data) < 32 or struct.unpack_from(">I", data, 0)[0] != _MAGIC:
        raise ValueError("not an hsperfdata file (bad magic)")
    order = "<" if data[4] == 1 else ">"
    offset, entries = struct.unpack_from(order + "II", data, 24)
    out: dict[str, int] = {}
    for _ in range(entries):
        length, name_at, vector, kind, _flags, _units, _var, data_at = struct.unpack_from(
            order + "IIIBBBBI", data, offset
        )
        if length == 0:
            break  # a JVM still writing its entries
        end = data.index(b"\0", offset + name_at)
        if kind == _TYPE_LONG and vector == 0:
            out[data[offset + name_at : end].decode()] = struct.unpack_from(order + "q", data, offset + data_at)[0]
        offset += length
    return out


def counters_of(pid: int, user: str | None = None) -> dict[str, int] | None:
    """The counters of the JVM ``pid`` run by ``user`` (default: this process's); None if it publishes none
    (``-XX:-UsePerfData``, another user, gone)."""
    path = Path("/tmp") / f"hsperfdata_{user or getpass.getuser()}" / str(pid)
    try:
        return read_counters(path.read_bytes())
    except (OSError, ValueError):
        return None


def class_loading(counters: dict[str, int]) -> dict[str, float]:
    """:data:`CLASS_LOADING`'s figures from ``counters``: counts as they are, times in seconds; a figure whose
    counters this JVM does not have is left out."""
    hz = counters.get("sun.os.hrt.frequency") or 1_000_000_000
    out: dict[str, float] = {}
    for label, names in CLASS_LOADING.items():
        if all(n in counters for n in names):
            total = sum(counters[n] for n in names)
            out[label] = total / hz if label.endswith("(s)") else total
    return out
