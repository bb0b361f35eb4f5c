package slidingwindow.oracle;

import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.BuiltInDslStoreSuppliers;
import org.apache.kafka.streams.state.DslSessionParams;
import org.apache.kafka.streams.state.DslWindowParams;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.SessionBytesStoreSupplier;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.TimestampedBytesStore;
import org.apache.kafka.streams.state.WindowBytesStoreSupplier;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.state.WindowStoreIterator;
import org.apache.kafka.streams.state.internals.WrappedStateStore;

/**
 * Kafka Streams' default DSL store suppliers (RocksDB: {@code RocksDBTimestampedWindowStore} for emit-on-update,
 * {@code RocksDBTimeOrderedWindowStore} for emit-on-close; {@code RocksDBSessionStore} and
 * {@code RocksDBTimeOrderedSessionStore} for session windows) with ONE change: {@code flush()} of the window or
 * session store does not reach RocksDB.
 *
 * <p>Why: TopologyTestDriver commits after every input record and every commit flushes the RocksDB memtables to new
 * SST files, which made the oracle ~10x slower. A RocksDB flush only persists data that RocksDB already serves from
 * its memtable (the WAL is disabled by Kafka Streams, nothing is restored in a test driver), so reads, iteration
 * order, segment expiry and therefore every observable result are unchanged; the caching layer above the store still
 * flushes (and forwards) exactly as before. Run the oracle with {@code -Doracle.rocksdb.flush=true} to use the
 * unmodified suppliers (the conformance test suite checks that both give identical results on a sample).
 */
public final class NoFlushRocksDBDslStoreSuppliers extends BuiltInDslStoreSuppliers.RocksDBDslStoreSuppliers {

    @Override
    public WindowBytesStoreSupplier windowStore(final DslWindowParams params) {
        final WindowBytesStoreSupplier inner = super.windowStore(params);
        return new WindowBytesStoreSupplier() {
            @Override
            public String name() {
                return inner.name();
            }

            @Override
            public WindowStore<Bytes, byte[]> get() {
                final WindowStore<Bytes, byte[]> store = inner.get();
                return store instanceof TimestampedBytesStore ? new TimestampedNoFlush(store) : new NoFlush(store);
            }

            @Override
            public String metricsScope() {
                return inner.metricsScope();
            }

            @Override
            public long segmentIntervalMs() {
                return inner.segmentIntervalMs();
            }

            @Override
            public long windowSize() {
                return inner.windowSize();
            }

            @Override
            public boolean retainDuplicates() {
                return inner.retainDuplicates();
            }

            @Override
            public long retentionPeriod() {
                return inner.retentionPeriod();
            }
        };
    }

    @Override
    public SessionBytesStoreSupplier sessionStore(final DslSessionParams params) {
        final SessionBytesStoreSupplier inner = super.sessionStore(params);
        return new SessionBytesStoreSupplier() {
            @Override
            public String name() {
                return inner.name();
            }

            @Override
            public SessionStore<Bytes, byte[]> get() {
                return new NoFlushSession(inner.get());
            }

            @Override
            public String metricsScope() {
                return inner.metricsScope();
            }

            @Override
            public long segmentIntervalMs() {
                return inner.segmentIntervalMs();
            }

            @Override
            public long retentionPeriod() {
                return inner.retentionPeriod();
            }
        };
    }

    /** Session store: delegates everything except {@link #flush()}. */
    static final class NoFlushSession extends WrappedStateStore<SessionStore<Bytes, byte[]>, Bytes, byte[]>
        implements SessionStore<Bytes, byte[]> {

        NoFlushSession(final SessionStore<Bytes, byte[]> wrapped) {
            super(wrapped);
        }

        @Override
        public void flush() {
            // intentionally empty: see class comment of NoFlushRocksDBDslStoreSuppliers
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> findSessions(final long earliestSessionEndTime,
                                                                      final long latestSessionEndTime) {
            return wrapped().findSessions(earliestSessionEndTime, latestSessionEndTime);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> findSessions(final Bytes key, final long earliestSessionEndTime,
                                                                      final long latestSessionStartTime) {
            return wrapped().findSessions(key, earliestSessionEndTime, latestSessionStartTime);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> backwardFindSessions(final Bytes key,
                                                                              final long earliestSessionEndTime,
                                                                              final long latestSessionStartTime) {
            return wrapped().backwardFindSessions(key, earliestSessionEndTime, latestSessionStartTime);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> findSessions(final Bytes keyFrom, final Bytes keyTo,
                                                                      final long earliestSessionEndTime,
                                                                      final long latestSessionStartTime) {
            return wrapped().findSessions(keyFrom, keyTo, earliestSessionEndTime, latestSessionStartTime);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> backwardFindSessions(final Bytes keyFrom, final Bytes keyTo,
                                                                              final long earliestSessionEndTime,
                                                                              final long latestSessionStartTime) {
            return wrapped().backwardFindSessions(keyFrom, keyTo, earliestSessionEndTime, latestSessionStartTime);
        }

        @Override
        public byte[] fetchSession(final Bytes key, final long sessionStartTime, final long sessionEndTime) {
            return wrapped().fetchSession(key, sessionStartTime, sessionEndTime);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> fetch(final Bytes key) {
            return wrapped().fetch(key);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> backwardFetch(final Bytes key) {
            return wrapped().backwardFetch(key);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> fetch(final Bytes keyFrom, final Bytes keyTo) {
            return wrapped().fetch(keyFrom, keyTo);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> backwardFetch(final Bytes keyFrom, final Bytes keyTo) {
            return wrapped().backwardFetch(keyFrom, keyTo);
        }

        @Override
        public void remove(final Windowed<Bytes> sessionKey) {
            wrapped().remove(sessionKey);
        }

        @Override
        public void put(final Windowed<Bytes> sessionKey, final byte[] aggregate) {
            wrapped().put(sessionKey, aggregate);
        }
    }

    /** Delegates everything except {@link #flush()}. */
    static class NoFlush extends WrappedStateStore<WindowStore<Bytes, byte[]>, Bytes, byte[]>
        implements WindowStore<Bytes, byte[]> {

        NoFlush(final WindowStore<Bytes, byte[]> wrapped) {
            super(wrapped);
        }

        @Override
        public void flush() {
            // intentionally empty: see class comment of NoFlushRocksDBDslStoreSuppliers
        }

        @Override
        public void put(final Bytes key, final byte[] value, final long windowStartTimestamp) {
            wrapped().put(key, value, windowStartTimestamp);
        }

        @Override
        public byte[] fetch(final Bytes key, final long time) {
            return wrapped().fetch(key, time);
        }

        @Override
        public WindowStoreIterator<byte[]> fetch(final Bytes key, final long timeFrom, final long timeTo) {
            return wrapped().fetch(key, timeFrom, timeTo);
        }

        @Override
        public WindowStoreIterator<byte[]> backwardFetch(final Bytes key, final long timeFrom, final long timeTo) {
            return wrapped().backwardFetch(key, timeFrom, timeTo);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> fetch(final Bytes keyFrom, final Bytes keyTo,
                                                               final long timeFrom, final long timeTo) {
            return wrapped().fetch(keyFrom, keyTo, timeFrom, timeTo);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> backwardFetch(final Bytes keyFrom, final Bytes keyTo,
                                                                       final long timeFrom, final long timeTo) {
            return wrapped().backwardFetch(keyFrom, keyTo, timeFrom, timeTo);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> fetchAll(final long timeFrom, final long timeTo) {
            return wrapped().fetchAll(timeFrom, timeTo);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> backwardFetchAll(final long timeFrom, final long timeTo) {
            return wrapped().backwardFetchAll(timeFrom, timeTo);
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> all() {
            return wrapped().all();
        }

        @Override
        public KeyValueIterator<Windowed<Bytes>, byte[]> backwardAll() {
            return wrapped().backwardAll();
        }
    }

    /** Same, for stores whose values carry a timestamp (keeps the {@link TimestampedBytesStore} marker). */
    static final class TimestampedNoFlush extends NoFlush implements TimestampedBytesStore {
        TimestampedNoFlush(final WindowStore<Bytes, byte[]> wrapped) {
            super(wrapped);
        }
    }
}
