"""The window store: per key, windows ordered by start, with Kafka Streams' read visibility and expiry.

A window is stored under ``(key, start)`` as a small mutable entry ``[acc, max_ts, count]``:

* ``acc``     the aggregation accumulator (immutable value, replaced on every put)
* ``max_ts``  the largest record timestamp in the window (docs/rules.md R5)
* ``count``   how many records were folded into ``acc``

Store time and visibility (R25). The store keeps its own stream time ``store_time`` = the largest window START
ever put (across all keys), not a record timestamp. Which windows a read can still see depends on the kind of
store Kafka Streams uses for the emit mode, with ``retention`` = ``2*td + grace`` by default::

    visibility   reads see starts >=             Kafka Streams store
    ----------   -------------------------       -------------------------------------------------
    KEY_FIRST    store_time - retention + 1      RocksDB/in-memory window store, no cache (emit every)
    TIME_FIRST   store_time - retention          time-ordered store of emit-on-window-close
    UNBOUNDED    everything still held           the record cache in front of the store (emit update)

    starts:  ... |-----------------retention-----------------|
                 ^ store_time - retention (+1 for KEY_FIRST)  ^ store_time
                 invisible below this bound                   max start ever put

Windows that no read can see any more are dropped physically (lazily per key on access, and in bulk by
:meth:`WindowStore.expire`), and counted in ``expired``.
"""

from __future__ import annotations

import enum
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Protocol

__all__ = [
    "NO_TIMESTAMP",
    "Columnar",
    "KeyWindows",
    "LazyRun",
    "RawRecords",
    "StoredWindow",
    "Visibility",
    "WindowStore",
    "key_bytes",
]

NO_TIMESTAMP = -1

#: One stored window as returned by reads: ``(key, start, acc, max_ts, count)``.
StoredWindow = tuple[Hashable, int, Any, int, int]


class Visibility(enum.Enum):
    """Which stored windows reads can see (see the module docstring)."""

    KEY_FIRST = "key-first"
    TIME_FIRST = "time-first"
    UNBOUNDED = "unbounded"


class RawRecords:
    """Batch path only: one key's accepted records within retention, from which it recomputes windows (R30).

    ``ts`` ascending (arrival order within a timestamp) and ``cols``: per aggregation part the numeric value
    each record contributes (``None`` for a count part). Python lists while the record path holds the key;
    numpy arrays while the batch path does, then the rows of the int64 matrix ``matrix`` (float64 values as
    their bits; None: not built yet, see ``columns.raw_matrix``)."""

    __slots__ = ("cols", "matrix", "ts")

    def __init__(self, ts: Any, cols: list[Any], matrix: Any = None) -> None:
        self.ts = ts
        self.cols = cols
        self.matrix = matrix


class LazyRun:
    """A key's lazy run (update mode, exact Count/Sum: windowstore/lazy.py) and what it knows of the key.

    When a key's records arrive in order, every record adds to the same suffix of its windows (those starting
    after ``t - td``). Instead of writing each of them, the lazy path adds to the run totals ``g`` (acc) and
    ``c`` (count) and sets ``t`` (max ts); the windows with ``start >= act`` then hold their values minus the
    run totals, and their max ts is ``t``. ``end``/``seq``: the newest start written by the run's last record
    and the write sequence number before it (that record wrote ``end`` first: window ``k`` places before it
    got ``seq + 1 + k``). :meth:`KeyWindows.settle` writes the real values (and record-cache stamps) back;
    :attr:`KeyWindows.entries` settles first, so every reader outside the hot loop sees real values."""

    __slots__ = ("act", "c", "end", "exact", "g", "kmax", "seq", "t")

    def __init__(self) -> None:
        #: the oldest start in the run (None: no run, every entry holds real values)
        self.act: int | None = None
        self.g: Any = 0
        self.c = 0
        self.t = 0
        self.end = 0
        self.seq = 0
        #: an upper bound of every window's max ts (None: not known yet)
        self.kmax: int | None = None
        #: every accumulator is an ``int`` (None: not known yet): the run's sums are then exact
        self.exact: bool | None = None


class KeyWindows:
    """The windows of one key: ``starts`` sorted ascending, ``entries[start] = [acc, max_ts, count]``.

    One key, up to four representations beside its entries, each in its own attribute:

    * ``starts`` / ``stored``: the entries (the record path's; :attr:`entries` gives real values);
    * ``run``: the lazy run over the entries (:class:`LazyRun`, windowstore/lazy.py), None if never used;
    * ``stamps`` / ``gone``: the record cache's write stamps (windowstore/cache.py);
    * ``raw`` and ``cols``: the batch path's raw records (:class:`RawRecords`) and its numpy columns
      (windowstore/columns.py); with ``cols`` set the entries are empty.
    """

    __slots__ = ("cols", "gone", "raw", "run", "stamps", "starts", "stored")

    def __init__(self) -> None:
        self.starts: list[int] = []
        #: ``{start: [acc, max_ts, count]}`` as stored: inside a lazy run (see the class docstring) the run's
        #: windows hold their values minus the run totals; :attr:`entries` gives real values
        self.stored: dict[int, list] = {}
        #: batch path only: the key's accepted records within retention (None: not kept)
        self.raw: RawRecords | None = None
        #: batch path only: the same windows as numpy columns; when set, ``starts``/``entries`` are empty
        #: and :meth:`WindowStore.load` turns them back into entries before any record-path access
        self.cols: Any = None
        #: update mode's record cache (windowstore/cache.py): start -> write sequence number of the windows
        #: written since the last flush (None: none), and the entries of those expired before the flush
        self.stamps: dict[int, int] | None = None
        self.gone: dict[int, list] | None = None
        #: the lazy run and what it knows of the key (None: the lazy path has not touched the key)
        self.run: LazyRun | None = None

    @property
    def entries(self) -> dict[int, list]:
        """``{start: [acc, max_ts, count]}`` with real values (a lazy run is settled first)."""
        run = self.run
        if run is not None and run.act is not None:
            self.settle()
        return self.stored

    @entries.setter
    def entries(self, entries: dict[int, list]) -> None:
        self.run = None
        self.stored = entries

    def __len__(self) -> int:
        return len(self.starts) if self.cols is None else len(self.cols)

    def settle(self) -> None:
        """End the lazy run: every window of the run gets its real values (and record-cache stamp) back."""
        run = self.run
        if run is not None and run.act is not None:
            starts = self.starts
            self.settle_range(run, bisect_left(starts, run.act), len(starts))
            run.act = None

    def settle_range(self, run: LazyRun, a: int, b: int) -> None:
        """Real values back for the windows of ``run`` (the key's :attr:`run`) at indexes ``a`` to ``b - 1``
        (they leave the run)."""
        starts = self.starts
        entries = self.stored
        g = run.g
        c = run.c
        t = run.t
        end = run.end
        stamps = self.stamps
        top = run.seq + 1 + bisect_left(starts, end)  # stamp of index x: top - x
        for x in range(a, b):
            s = starts[x]
            e = entries[s]
            e[0] += g
            e[1] = t
            e[2] += c
            if s <= end and stamps is not None:
                stamps[s] = top - x

    def trim_below(self, bound: int) -> int:
        """Drop every window with start < ``bound`` (and raw records with ts < ``bound``); return how many
        windows were dropped."""
        raw = self.raw
        if raw is not None and raw.ts and raw.ts[0] < bound:
            j = bisect_left(raw.ts, bound)
            del raw.ts[:j]
            for col in raw.cols:
                if col is not None:
                    del col[:j]
        starts = self.starts
        if not starts or starts[0] >= bound:
            return 0
        run = self.run
        if run is not None and run.act is not None and run.act < bound:
            self.settle()
        i = bisect_left(starts, bound)
        dropped = starts[:i]
        del starts[:i]
        entries = self.stored
        stamps = self.stamps
        if stamps:  # written since the last flush: the flush still reports them (R21)
            gone = self.gone
            if gone is None:
                gone = self.gone = {}
            for s in dropped:
                e = entries.pop(s)
                if s in stamps:
                    gone[s] = e
        else:
            for s in dropped:
                del entries[s]
        return i


class Columnar(Protocol):
    """How the store turns a key the batch path holds as numpy columns back into entries, and trims it
    (:class:`windowstore.columns.ColumnCodec`)."""

    def materialize(self, kw: KeyWindows) -> None: ...

    def trim(self, kw: KeyWindows, bound: int) -> int: ...


class WindowStore:
    """Per-key windows ordered by start, with inclusive range scans and retention by the store's own time.

    ``purge_margin_ms`` (``UNBOUNDED`` only): windows whose start is below ``store_time - purge_margin_ms`` are
    dropped; the processor sets it so that no accepted record could ever read them again.

    ``purge_slack_ms`` (``UNBOUNDED`` only): a key's windows are purged on access only once its oldest window
    is more than the slack below the purge bound, so one purge drops a run of windows instead of one per
    access (no read can see them either way; :meth:`expire` purges exactly to the bound)::

        starts:  |--- purged on access --|---- slack ----|----------- held, readable ------------->
                 ^ oldest start          ^ bound - slack ^ purge bound = store_time - purge_margin_ms
    """

    def __init__(
        self,
        retention_ms: int,
        visibility: Visibility = Visibility.KEY_FIRST,
        purge_margin_ms: int | None = None,
        loader: Callable[[Hashable], KeyWindows | None] | None = None,
        purge_slack_ms: int = 0,
        columnar: Columnar | None = None,
    ) -> None:
        if retention_ms < 0:
            raise ValueError(f"retention_ms must not be negative, got {retention_ms}")
        self.retention_ms = retention_ms
        self.visibility = visibility
        self.purge_margin_ms = purge_margin_ms
        #: read bound = store_time - read_lag (None: unbounded); purge bound = store_time - purge_lag
        self.read_lag: int | None = {
            Visibility.KEY_FIRST: retention_ms - 1,
            Visibility.TIME_FIRST: retention_ms,
            Visibility.UNBOUNDED: None,
        }[visibility]
        self.purge_lag = purge_margin_ms if visibility is Visibility.UNBOUNDED else self.read_lag
        if purge_slack_ms < 0:
            raise ValueError(f"purge_slack_ms must not be negative, got {purge_slack_ms}")
        #: purge on access when the oldest start < store_time - trim_lag (the slack only where purging is
        #: not what hides windows from reads)
        self.trim_lag = (
            None
            if self.purge_lag is None
            else self.purge_lag + (purge_slack_ms if visibility is Visibility.UNBOUNDED else 0)
        )
        self.store_time = NO_TIMESTAMP
        #: windows of the keys held in memory (all keys, unless a ``loader`` brings them in on first use)
        self.keys: dict[Hashable, KeyWindows] = {}
        #: largest window start of every key that has windows, in memory or not (idle-key expiry)
        self.key_max_start: dict[Hashable, int] = {}
        #: keys whose windows changed since :meth:`clear_dirty` (what an external state store must write)
        self.dirty: set[Hashable] = set()
        self.loader = loader
        self.expired = 0
        #: windows held (including not-yet-purged invisible ones): every module that adds or drops windows
        #: of a key behind the store's back (the record path's inline inserts, the batch path) adjusts it
        self.size = 0
        #: the batch path's columnar keys (None: every key is held as entries), see :class:`Columnar`
        self.columnar = columnar

    def _columnar(self) -> Columnar:
        """:attr:`columnar`, for a key held as columns (only the batch path, which has it, makes them)."""
        columnar = self.columnar
        if columnar is None:
            raise ValueError("a key is held as columns but the store has no columnar codec")
        return columnar

    # -- visibility -------------------------------------------------------------------------------------------
    def read_bound(self) -> int:
        """Smallest window start a read can see now (inclusive)."""
        lag = self.read_lag
        if lag is None or self.store_time == NO_TIMESTAMP:
            return -(1 << 62)
        return self.store_time - lag

    def purge_bound(self) -> int:
        """Starts below this are never read again and may be dropped."""
        lag = self.purge_lag
        if lag is None or self.store_time == NO_TIMESTAMP:
            return -(1 << 62)
        return self.store_time - lag

    # -- writes -----------------------------------------------------------------------------------------------
    def load(self, key: Hashable, columns: bool = False) -> KeyWindows | None:
        """The key's windows from memory, or from the loader the first time the key is used: as entries, or
        as they are (entries or columns) with ``columns=True`` - the batch path, which would turn entries
        materialized here straight back into columns."""
        kw = self.keys.get(key)
        if kw is None and self.loader is not None and key in self.key_max_start:
            kw = self.loader(key)
            if kw is not None:
                self.keys[key] = kw
                self.size += len(kw)
        if (
            not columns
            and kw is not None
            and (kw.cols is not None or (kw.raw is not None and type(kw.raw.ts) is not list))
        ):
            self._columnar().materialize(kw)  # a loaded key may come as columns too
        return kw

    def windows_of(self, key: Hashable) -> KeyWindows:
        """The key's windows, trimmed to what is still visible (created empty if the key is new)."""
        kw = self.keys.get(key)
        if kw is None or kw.cols is not None or (kw.raw is not None and type(kw.raw.ts) is not list):
            kw = self.load(key)
            if kw is None:
                kw = self.keys[key] = KeyWindows()
                return kw
        starts = kw.starts
        # purge_bound() inline: with no store time yet, store_time - lag is below every start (>= 0)
        lag = self.trim_lag
        if starts and lag is not None and starts[0] < self.store_time - lag:
            n = kw.trim_below(self.store_time - self.purge_lag)  # type: ignore[operator]
            self.expired += n
            self.size -= n
            self.dirty.add(key)
        return kw

    def put(self, key: Hashable, start: int, acc: Any, max_ts: int, count: int) -> bool:
        """Store a window (insert or replace). Returns True when a new window was stored (False for a
        replaced one, and for a new one below the read bound, which no read could ever see)."""
        if start > self.store_time:
            self.store_time = start
        kw = self.windows_of(key)
        self.dirty.add(key)
        entries = kw.entries  # (settles a lazy run)
        kw.run = None  # what the lazy run knew of the key's windows may not hold any more
        entry = entries.get(start)
        if entry is not None:
            entry[0] = acc
            entry[1] = max_ts
            entry[2] = count
            return False
        return self.insert(key, kw, start, [acc, max_ts, count])

    def insert(self, key: Hashable, kw: KeyWindows, start: int, entry: list) -> bool:
        """Add a window the key does not have yet (``entry`` = ``[acc, max_ts, count]``). Returns False, storing
        nothing, when ``start`` is below the read bound: Kafka's store would keep it invisible (or drop it as
        an expired segment), so no read could ever see it."""
        lag = self.read_lag
        if lag is not None and start < self.store_time - lag and self.store_time != NO_TIMESTAMP:
            return False
        kw.stored[start] = entry
        starts = kw.starts
        if not starts or start > starts[-1]:
            starts.append(start)
            self.key_max_start[key] = start
        else:
            starts.insert(bisect_left(starts, start), start)
        self.size += 1
        return True

    # -- reads ------------------------------------------------------------------------------------------------
    def get(self, key: Hashable, start: int) -> StoredWindow | None:
        """The window of ``key`` starting at ``start`` if it exists and is visible."""
        kw = self.load(key)
        if kw is None or start < self.read_bound():
            return None
        e = kw.entries.get(start)
        return None if e is None else (key, start, e[0], e[1], e[2])

    def fetch(self, key: Hashable, time_from: int, time_to: int) -> Iterator[StoredWindow]:
        """Windows of ``key`` with ``time_from <= start <= time_to`` (both inclusive), ascending start."""
        kw = self.load(key)
        if kw is None:
            return
        lo = max(time_from, self.read_bound())
        starts = kw.starts
        for i in range(bisect_left(starts, lo), bisect_right(starts, time_to)):
            s = starts[i]
            e = kw.entries[s]
            yield (key, s, e[0], e[1], e[2])

    def backward_fetch(self, key: Hashable, time_from: int, time_to: int) -> Iterator[StoredWindow]:
        """Like :meth:`fetch` but in descending start order."""
        kw = self.load(key)
        if kw is None:
            return
        lo = max(time_from, self.read_bound())
        starts = kw.starts
        for i in range(bisect_right(starts, time_to) - 1, bisect_left(starts, lo) - 1, -1):
            s = starts[i]
            e = kw.entries[s]
            yield (key, s, e[0], e[1], e[2])

    def fetch_all(self, time_from: int, time_to: int) -> list[StoredWindow]:
        """Every key's windows with ``time_from <= start <= time_to``, ordered by (start, key bytes)."""
        out: list[StoredWindow] = []
        for key in list(self.key_max_start):
            out.extend(self.fetch(key, time_from, time_to))
        out.sort(key=lambda w: (w[1], key_bytes(w[0])))
        return out

    def all_windows(self) -> Iterator[StoredWindow]:
        """Every visible window, per key in insertion order of keys, ascending start."""
        bound = self.read_bound()
        for key in list(self.keys):
            kw = self.load(key)
            assert kw is not None  # key is one of self.keys
            for s in kw.starts:
                if s >= bound:
                    e = kw.entries[s]
                    yield (key, s, e[0], e[1], e[2])

    # -- maintenance ------------------------------------------------------------------------------------------
    def expire(self) -> int:
        """Drop every window below the purge bound, in memory and of idle keys not loaded (their whole
        state is gone once their newest window is); returns windows dropped from memory. Keys that lost
        windows are marked dirty; a key with no window left reads as ``None`` in an export."""
        bound = self.purge_bound()
        dropped = 0
        for key, kw in self.keys.items():
            n = kw.trim_below(bound) if kw.cols is None else self._columnar().trim(kw, bound)
            if n:
                dropped += n
                self.dirty.add(key)
        for key in [k for k, kw in self.keys.items() if not len(kw)]:
            del self.keys[key]
        idle = [k for k, s in self.key_max_start.items() if s < bound]
        for key in idle:
            del self.key_max_start[key]
            self.dirty.add(key)
        self.expired += dropped
        self.size -= dropped
        return dropped

    def clear_dirty(self) -> None:
        self.dirty.clear()

    def __len__(self) -> int:
        """Number of windows held (including not-yet-purged invisible ones)."""
        return self.size

    def num_keys(self) -> int:
        return len(self.keys)


def key_bytes(key: Hashable) -> bytes:
    """Byte form of a key used for cross-key ordering (Kafka orders by serialized key bytes).

    ``str`` -> UTF-8 (Kafka's StringSerde), ``bytes`` as is, ``int`` -> 8-byte big-endian two's complement
    (LongSerde); anything else by its ``str``.
    """
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return (key & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")
    return str(key).encode("utf-8")
