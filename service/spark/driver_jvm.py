"""The driver JVM's options and environment: what it logs, and how much memory it holds beyond its heap.

The driver JVM is the largest process of the service (with a local master it runs Spark's tasks and the RocksDB
state store too). Its heap is ``driver_memory`` at most; the rest of its resident memory is class metadata
(Spark loads ~20,000 classes: ~150 MiB of metaspace), compiled code, the collector's own structures and native
allocations. The options here keep what the service controls small:

* **The serial collector** (``-XX:+UseSerialGC``) unless ``driver_java_options`` chooses one. G1, the JVM's
  choice on a machine with 2 cores and 2 GiB or more, keeps remembered sets and per-region structures (~50 MiB
  here) and grows its committed heap early to meet its pause-time goal; the service's heap is small (its windows
  live in the Python workers and RocksDB), so the serial collector's pauses stay short and its heap tracks
  what is live.
* **A heap that starts small and gives back** (``-Xms64m``, ``-XX:MinHeapFreeRatio=10``,
  ``-XX:MaxHeapFreeRatio=30``): the JVM's default initial heap is 1/64 of the machine's memory, committed and
  touched by allocation before the first collection whatever the service needs.
* **A young generation of 24 MiB** (``-Xmn24m``, with the serial collector only): the serial collector sizes its
  young generation as a third of the heap and grows it with the heap, up to a third of ``driver_memory``; a
  micro-batch's garbage (Kafka records, Arrow buffers on their way to the workers) is dead by the next minor
  collection whatever its size, so the larger young generation only held more dead memory. Fixed at 16-32 MiB the
  JVM's peak was ~30 MiB lower in ``bench/side_by_side.py`` with no change in throughput or latency
  (bench/HISTORY.md). Not with a collector chosen in ``driver_java_options``: G1 sizes its young generation
  itself to meet its pause goal, and a fixed size disables that.
* **Two malloc arenas** (``MALLOC_ARENA_MAX=2`` in the environment of the JVM and the Python processes it
  starts, unless set): glibc gives each thread that allocates concurrently an arena of its own, up to 8 per core;
  the JVM's ~100 threads (Kafka clients, RocksDB, Netty, the Python runners) would each keep freed memory in
  their own.
* **Compile thresholds three times the JVM's** (``-XX:CompileThresholdScaling=3``): a start runs Spark's
  planning, code generation and first tasks once each, and the JVM compiled some 14,000 methods on the way to
  the first output, its compiler threads competing for the cores with the start itself (bench/HISTORY.md). With
  higher thresholds code run a few hundred times stays interpreted, and what a micro-batch runs millions of
  times is still compiled, a little later.
* **The client compiler alone** (``-XX:TieredStopAtLevel=1``): the optimizing compiler (C2) spent a large share
  of a restart's CPU, and its code cache, arenas and profiles a large share of the JVM's peak memory, for no gain
  in the steady state: the service's hot code is in Python and RocksDB, and what the JVM runs per record (Kafka
  records, Arrow vectors, the shuffle) gains little from C2 here. Restarts, peak memory, backlog and latency
  with and without it: bench/HISTORY.md (issue 34). A deployment that wants C2 back sets
  ``driver_java_options=-XX:TieredStopAtLevel=4``.

``driver_java_options`` (a setting) comes last, so any option there overrides these (the JVM takes the last of
two values); a collector chosen there replaces the serial one (two collectors are an error to the JVM).

An earlier measurement (2026-11-27, a loaded machine, tiered compilation without the higher thresholds) had C2's
code faster after a longer warm-up at 1,000 records/s; with today's options it was not (bench/HISTORY.md).
Measured in ``bench/side_by_side.py`` (per-process peak memory) and ``bench/batch_phases.py`` (latency):
bench/RESULTS.md.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import MutableMapping

__all__ = [
    "FOOTPRINT_OPTIONS",
    "JIT_OPTIONS",
    "MALLOC_ARENAS",
    "SERIAL_YOUNG_OPTIONS",
    "java_options",
    "set_malloc_arenas",
]

#: the heap's sizing for a small footprint (see the module's docstring)
FOOTPRINT_OPTIONS = ("-Xms64m", "-XX:MinHeapFreeRatio=10", "-XX:MaxHeapFreeRatio=30")
#: the serial collector's young generation (see the module's docstring); not with a collector the user chooses
SERIAL_YOUNG_OPTIONS = ("-Xmn24m",)
#: fewer compilations of code a start runs only a few hundred times, by the client compiler alone (see the module's
#: docstring)
JIT_OPTIONS = ("-XX:CompileThresholdScaling=3", "-XX:TieredStopAtLevel=1")
#: glibc malloc arenas of the driver JVM and the processes it starts
MALLOC_ARENAS = "2"

_CHOOSES_COLLECTOR = re.compile(r"^-XX:\+Use\w*GC$")


def java_options(log_config: str | None, archive_options: list[str], user_options: str) -> list[str]:
    """The driver JVM's options, in order: the log4j2 configuration file (``log_config``, if any), the serial
    collector and its :data:`SERIAL_YOUNG_OPTIONS` unless ``user_options`` choose a collector,
    :data:`FOOTPRINT_OPTIONS`, :data:`JIT_OPTIONS`, the
    class-data archive's (``archive_options``), then ``user_options`` (shell words; raises ValueError on
    unbalanced quotes)."""
    user = shlex.split(user_options)
    options = [f"-Dlog4j2.configurationFile=file:{log_config}"] if log_config else []
    if not any(_CHOOSES_COLLECTOR.match(o) for o in user):
        options += ["-XX:+UseSerialGC", *SERIAL_YOUNG_OPTIONS]
    return options + list(FOOTPRINT_OPTIONS) + list(JIT_OPTIONS) + list(archive_options) + user


def set_malloc_arenas(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Set ``MALLOC_ARENA_MAX`` for the processes started from now on (the JVM, and through it Spark's Python
    daemon and workers) unless the environment has it; whether it was set here."""
    if "MALLOC_ARENA_MAX" in environ:
        return False
    environ["MALLOC_ARENA_MAX"] = MALLOC_ARENAS
    return True
