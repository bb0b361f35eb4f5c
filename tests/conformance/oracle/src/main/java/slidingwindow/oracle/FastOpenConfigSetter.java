package slidingwindow.oracle;

import org.apache.kafka.streams.state.RocksDBConfigSetter;
import org.rocksdb.Options;

import java.util.Map;

/**
 * RocksDB options that only affect speed, never results: {@code max_file_opening_threads=1} stops RocksDB from
 * starting (and joining) 16 native threads on every {@code DB::Open} - the oracle opens at least one RocksDB
 * instance (one per store segment) per case.
 */
public final class FastOpenConfigSetter implements RocksDBConfigSetter {
    @Override
    public void setConfig(final String storeName, final Options options, final Map<String, Object> configs) {
        options.setMaxFileOpeningThreads(1);
    }

    @Override
    public void close(final String storeName, final Options options) {
        // nothing to release
    }
}
