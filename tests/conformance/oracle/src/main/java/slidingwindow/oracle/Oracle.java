package slidingwindow.oracle;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.io.JsonStringEncoder;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.WindowStore;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.io.Writer;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

/**
 * Kafka Streams oracle for SlidingWindows (KIP-450), TimeWindows (tumbling, hopping) and SessionWindows aggregations.
 *
 * <p>Window type per case: {@code "window"} = {@code sliding} (default; {@code time_difference_ms}), {@code tumbling}
 * ({@code size_ms}: {@code TimeWindows.ofSizeAndGrace}), {@code hopping} ({@code size_ms}, {@code advance_ms}:
 * {@code .advanceBy}) or {@code session} ({@code gap_ms}: {@code SessionWindows.ofInactivityGapAndGrace}, with a
 * session merger per aggregation: arrays concatenated, counts / sums / mean pairs added, min / max compared with the
 * first of equals kept, variance accumulators shifted and added, first / last from the earlier / later session). A
 * session tombstone (a session a merge replaced) is output with {@code "value":null}.
 *
 * <p>Runs records through {@code stream().groupByKey().windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(td, grace))
 * .aggregate(...)} in a {@link TopologyTestDriver} (one task = one input partition), in arrival order, with the
 * records' own timestamps, and reports every record forwarded downstream of the windowed KTable.
 *
 * <p>Emit modes: {@code every} = caching disabled (every window put is forwarded); {@code update} = caching enabled
 * (the default; TopologyTestDriver commits, i.e. flushes the cache, after every input record); {@code close} =
 * {@code EmitStrategy.onWindowClose()}. The window store is Kafka's default (RocksDB) store in all modes.
 *
 * <p>Values are JSON; aggregates are kept as raw JSON text so values round-trip exactly:
 * {@code collect} = JSON array of the input values in aggregation order, {@code count}, {@code sum}
 * (integers exact, otherwise IEEE double), {@code min}, {@code max} (exact numeric comparison, the first of equal
 * values wins), {@code mean} (sum / count as double), {@code variance} and {@code stddev} (population, as
 * {@code windowstore.aggregations.Variance} computes them: shifted by the first value), {@code first}, {@code last}
 * (a JSON null value counts; merged: the earlier / later session's).
 *
 * <p>Modes:
 * <ul>
 *   <li>single case: {@code --time-difference-ms D --grace-ms G --aggregation A --emit M [--retention-ms R]
 *   [--with-index]};
 *   stdin = JSON lines {@code {"key": str|null, "value": any|null, "ts": int}}; stdout = one JSON line per emitted
 *   record {@code {"key","window_start","window_end","value","ts"}}; stderr = one summary JSON line
 *   {@code {"records": N, "dropped_records_total": X}}.</li>
 *   <li>batch: {@code --batch [--threads N]}; stdin = JSON lines, one case each:
 *   {@code {"id":..., "time_difference_ms":D, "grace_ms":G, "aggregation":A, "emit":M, "input":[...]}}
 *   (optional {@code "retention_ms"}: {@code Materialized.withRetention}, default 2*td+grace);
 *   stdout = one JSON line per case, in input order:
 *   {@code {"id":..., "updates":[{... , "input_index": i}], "records":N, "dropped_records_total":X}} or
 *   {@code {"id":..., "error": "..."}}. {@code input_index} = index of the input record whose processing (and the
 *   commit that follows it) forwarded the update. A summary line with timing goes to stderr at the end.</li>
 * </ul>
 */
public final class Oracle {

    private static final JsonFactory JSON = new JsonFactory();
    private static final AtomicLong CASE_COUNTER = new AtomicLong();
    private static final String INPUT_TOPIC = "input";
    /**
     * -Doracle.rocksdb.flush=true: Kafka's unmodified store suppliers and RocksDB options (see
     * {@link NoFlushRocksDBDslStoreSuppliers} and {@link FastOpenConfigSetter} for the speed-only changes otherwise made).
     */
    static final boolean ROCKSDB_FLUSH = Boolean.parseBoolean(System.getProperty("oracle.rocksdb.flush", "false"));
    /** Parent of the per-case state directories: -Doracle.state.parent, else /dev/shm when usable, else java.io.tmpdir. */
    static final Path STATE_PARENT = stateParent();

    private Oracle() {
    }

    // ------------------------------------------------------------------ data

    static final class InRec {
        final String key;        // null = null key
        final String valueJson;  // raw JSON text; null = JSON null / absent
        final long ts;

        InRec(final String key, final String valueJson, final long ts) {
            this.key = key;
            this.valueJson = valueJson;
            this.ts = ts;
        }
    }

    static final class Case {
        String idJson = "null";  // raw JSON text of the id
        String window = "sliding";
        long td = -1;
        long size = -1;
        long advance = -1;
        long gap = -1;
        long grace = -1;
        Long retention;  // null = Kafka's default (2 * td + grace)
        String aggregation;
        String emit;
        List<InRec> input = new ArrayList<>();
    }

    static final class Update {
        final String key;
        final long start;
        final long end;
        final String value;  // raw JSON
        final long ts;
        final int inputIndex;

        Update(final String key, final long start, final long end, final String value, final long ts, final int inputIndex) {
            this.key = key;
            this.start = start;
            this.end = end;
            this.value = value;
            this.ts = ts;
            this.inputIndex = inputIndex;
        }
    }

    static final class Result {
        final List<Update> updates;
        final int records;
        final double dropped;

        Result(final List<Update> updates, final int records, final double dropped) {
            this.updates = updates;
            this.records = records;
            this.dropped = dropped;
        }
    }

    // ------------------------------------------------------------------ aggregations (raw JSON text in, raw JSON text out)

    interface Agg {
        String init();

        String add(String agg, String valueJson);

        /** Session merger: {@code aggOne} folded so far, {@code aggTwo} the next session's aggregate. */
        String merge(String aggOne, String aggTwo);

        default String finish(final String agg) {
            return agg;
        }
    }

    static boolean isIntegral(final String num) {
        for (int i = 0; i < num.length(); i++) {
            final char c = num.charAt(i);
            if (c == '.' || c == 'e' || c == 'E') {
                return false;
            }
        }
        return true;
    }

    static String requireNumber(final String json) {
        if (json.isEmpty()) {
            throw new IllegalArgumentException("empty value");
        }
        final char c = json.charAt(0);
        if (c != '-' && (c < '0' || c > '9')) {
            throw new IllegalArgumentException("value is not a JSON number: " + json);
        }
        return json;
    }

    /** Python semantics: int + int is exact, otherwise float addition. */
    static String plus(final String a, final String b) {
        if (isIntegral(a) && isIntegral(b)) {
            return new BigInteger(a).add(new BigInteger(b)).toString();
        }
        return formatDouble(Double.parseDouble(a) + Double.parseDouble(b));
    }

    /** Python semantics: int - int is exact, otherwise float subtraction. */
    static String minus(final String a, final String b) {
        if (isIntegral(a) && isIntegral(b)) {
            return new BigInteger(a).subtract(new BigInteger(b)).toString();
        }
        return formatDouble(Double.parseDouble(a) - Double.parseDouble(b));
    }

    /** Python semantics: int * int is exact, otherwise float multiplication. */
    static String times(final String a, final String b) {
        if (isIntegral(a) && isIntegral(b)) {
            return new BigInteger(a).multiply(new BigInteger(b)).toString();
        }
        return formatDouble(Double.parseDouble(a) * Double.parseDouble(b));
    }

    /** Python's {@code a / n} for a number {@code a} and an int {@code n > 0}: int / int correctly rounded. */
    static double divide(final String a, final long n) {
        if (isIntegral(a)) {
            return new BigDecimal(new BigInteger(a))
                .divide(BigDecimal.valueOf(n), java.math.MathContext.DECIMAL128).doubleValue();
        }
        return Double.parseDouble(a) / n;
    }

    /**
     * Population variance as windowstore.aggregations.Variance computes it: the accumulator is
     * {@code "n shift s ss"} with {@code shift} = the first value, {@code s = sum(x - shift)},
     * {@code ss = sum((x - shift)^2)} (ints exact, floats IEEE, Python's mixing rules); the session merger shifts
     * the second accumulator to the first one's shift; the result is {@code (ss - s*s/n) / n}, negative -> 0.0.
     */
    static Agg variance(final boolean sqrt) {
        return new Agg() {
            public String init() {
                return "0 0 0 0";
            }

            public String add(final String agg, final String v) {
                requireNumber(v);
                final String[] f = agg.split(" ");
                final long n = Long.parseLong(f[0]);
                final String k = n == 0 ? v : f[1];
                final String d = minus(v, k);
                return (n + 1) + " " + k + " " + plus(f[2], d) + " " + plus(f[3], times(d, d));
            }

            public String merge(final String a, final String b) {
                final String[] x = a.split(" ");
                final String[] y = b.split(" ");
                if (Long.parseLong(x[0]) == 0) {
                    return b;
                }
                if (Long.parseLong(y[0]) == 0) {
                    return a;
                }
                final String d = minus(y[1], x[1]);
                final String n2 = y[0];
                final String s = plus(plus(x[2], y[2]), times(n2, d));
                final String ss = plus(plus(plus(x[3], y[3]), times(times("2", d), y[2])), times(times(n2, d), d));
                return (Long.parseLong(x[0]) + Long.parseLong(n2)) + " " + x[1] + " " + s + " " + ss;
            }

            public String finish(final String agg) {
                final String[] f = agg.split(" ");
                final long n = Long.parseLong(f[0]);
                if (n == 0) {
                    return "null";
                }
                final double raw = (Double.parseDouble(f[3]) - divide(times(f[2], f[2]), n)) / n;
                final double population = raw > 0 ? raw : 0.0;  // Python: var if var > 0 else 0.0 (NaN, -0.0 too)
                return formatDouble(sqrt ? Math.sqrt(population) : population);
            }
        };
    }

    /**
     * The first (or last) value in aggregation order; a JSON null value counts. The accumulator is the value's raw
     * JSON text, or {@code ""} before any value (a non-null String: Kafka's stores delete on null).
     */
    static Agg firstOrLast(final boolean last) {
        return new Agg() {
            public String init() {
                return "";
            }

            public String add(final String agg, final String v) {
                return last || agg.isEmpty() ? (v == null ? "null" : v) : agg;
            }

            public String merge(final String a, final String b) {
                if (last) {
                    return b.isEmpty() ? a : b;
                }
                return a.isEmpty() ? b : a;
            }

            public String finish(final String agg) {
                return agg.isEmpty() ? "null" : agg;
            }
        };
    }

    static String formatDouble(final double d) {
        if (Double.isNaN(d) || Double.isInfinite(d)) {
            throw new ArithmeticException("non-finite result " + d);
        }
        return Double.toString(d);  // round-trips exactly (Python float(text) gives the same double)
    }

    static Agg aggregation(final String name) {
        switch (name) {
            case "collect":
                return new Agg() {
                    public String init() {
                        return "[]";
                    }

                    public String add(final String agg, final String v) {
                        if (agg.length() == 2) {
                            return "[" + v + "]";
                        }
                        return agg.substring(0, agg.length() - 1) + "," + v + "]";
                    }

                    public String merge(final String a, final String b) {
                        if (a.length() == 2) {
                            return b;
                        }
                        if (b.length() == 2) {
                            return a;
                        }
                        return a.substring(0, a.length() - 1) + "," + b.substring(1);
                    }
                };
            case "count":
                return new Agg() {
                    public String init() {
                        return "0";
                    }

                    public String add(final String agg, final String v) {
                        return Long.toString(Long.parseLong(agg) + 1);
                    }

                    public String merge(final String a, final String b) {
                        return Long.toString(Long.parseLong(a) + Long.parseLong(b));
                    }
                };
            case "sum":
                return new Agg() {
                    public String init() {
                        return "0";
                    }

                    public String add(final String agg, final String v) {
                        return plus(agg, requireNumber(v));
                    }

                    public String merge(final String a, final String b) {
                        return plus(a, b);
                    }
                };
            case "min":
            case "max":
                final boolean isMin = name.equals("min");
                return new Agg() {
                    public String init() {
                        return null;  // like reduce(): the first value is taken as-is
                    }

                    public String add(final String agg, final String v) {
                        requireNumber(v);
                        if (agg == null) {
                            return v;
                        }
                        final int cmp = new BigDecimal(v).compareTo(new BigDecimal(agg));
                        return (isMin ? cmp < 0 : cmp > 0) ? v : agg;
                    }

                    public String merge(final String a, final String b) {
                        if (a == null) {
                            return b;
                        }
                        if (b == null) {
                            return a;
                        }
                        final int cmp = new BigDecimal(b).compareTo(new BigDecimal(a));
                        return (isMin ? cmp < 0 : cmp > 0) ? b : a;
                    }
                };
            case "mean":
                return new Agg() {
                    public String init() {
                        return "0 0";
                    }

                    public String add(final String agg, final String v) {
                        final int sp = agg.indexOf(' ');
                        final long n = Long.parseLong(agg.substring(sp + 1));
                        return plus(agg.substring(0, sp), requireNumber(v)) + " " + (n + 1);
                    }

                    public String merge(final String a, final String b) {
                        final int sa = a.indexOf(' ');
                        final int sb = b.indexOf(' ');
                        return plus(a.substring(0, sa), b.substring(0, sb)) + " "
                            + (Long.parseLong(a.substring(sa + 1)) + Long.parseLong(b.substring(sb + 1)));
                    }

                    public String finish(final String agg) {
                        final int sp = agg.indexOf(' ');
                        final String sum = agg.substring(0, sp);
                        final long n = Long.parseLong(agg.substring(sp + 1));
                        if (isIntegral(sum)) {
                            // Python int / int is correctly rounded
                            return formatDouble(new BigDecimal(new BigInteger(sum))
                                .divide(BigDecimal.valueOf(n), java.math.MathContext.DECIMAL128).doubleValue());
                        }
                        return formatDouble(Double.parseDouble(sum) / n);
                    }
                };
            case "variance":
            case "stddev":
                return variance(name.equals("stddev"));
            case "first":
            case "last":
                return firstOrLast(name.equals("last"));
            default:
                throw new IllegalArgumentException("unknown aggregation: " + name);
        }
    }

    // ------------------------------------------------------------------ running one case

    static Result run(final Case c) throws IOException {
        if (c.grace < 0) {
            throw new IllegalArgumentException("grace_ms is required and must be >= 0");
        }
        final Agg agg = aggregation(c.aggregation);
        final String emit = c.emit;
        if (!emit.equals("every") && !emit.equals("update") && !emit.equals("close")) {
            throw new IllegalArgumentException("unknown emit mode: " + emit);
        }

        final List<Update> updates = new ArrayList<>();
        final int[] currentIndex = {-1};

        final StreamsBuilder builder = new StreamsBuilder();
        final KGroupedStream<String, String> grouped = builder
            .stream(INPUT_TOPIC, Consumed.with(Serdes.String(), Serdes.String()))
            .groupByKey(Grouped.with(Serdes.String(), Serdes.String()));
        final KTable<Windowed<String>, String> table;
        if (c.window.equals("session")) {
            if (c.gap < 0) {
                throw new IllegalArgumentException("session windows need gap_ms >= 0");
            }
            SessionWindowedKStream<String, String> windowed = grouped.windowedBy(
                SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(c.gap), Duration.ofMillis(c.grace)));
            Materialized<String, String, SessionStore<Bytes, byte[]>> materialized =
                Materialized.<String, String, SessionStore<Bytes, byte[]>>with(Serdes.String(), Serdes.String())
                    .withLoggingDisabled();
            if (c.retention != null) {
                materialized = materialized.withRetention(Duration.ofMillis(c.retention));
            }
            switch (emit) {
                case "every":
                    materialized = materialized.withCachingDisabled();
                    break;
                case "update":
                    materialized = materialized.withCachingEnabled();
                    break;
                default:
                    windowed = windowed.emitStrategy(EmitStrategy.onWindowClose());
            }
            table = windowed.aggregate(agg::init, (k, v, a) -> agg.add(a, v), (k, a, b) -> agg.merge(a, b),
                materialized);
        } else {
            final TimeWindowedKStream<String, String> windowed0;
            switch (c.window) {
                case "sliding":
                    if (c.td < 0) {
                        throw new IllegalArgumentException("sliding windows need time_difference_ms >= 0");
                    }
                    windowed0 = grouped.windowedBy(
                        SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(c.td), Duration.ofMillis(c.grace)));
                    break;
                case "tumbling":
                case "hopping": {
                    if (c.size <= 0) {
                        throw new IllegalArgumentException(c.window + " windows need size_ms > 0");
                    }
                    TimeWindows tw = TimeWindows.ofSizeAndGrace(Duration.ofMillis(c.size), Duration.ofMillis(c.grace));
                    if (c.window.equals("hopping")) {
                        if (c.advance <= 0) {
                            throw new IllegalArgumentException("hopping windows need advance_ms > 0");
                        }
                        tw = tw.advanceBy(Duration.ofMillis(c.advance));
                    }
                    windowed0 = grouped.windowedBy(tw);
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown window type: " + c.window);
            }
            TimeWindowedKStream<String, String> windowed = windowed0;
            Materialized<String, String, WindowStore<Bytes, byte[]>> materialized =
                Materialized.<String, String, WindowStore<Bytes, byte[]>>with(Serdes.String(), Serdes.String())
                    .withLoggingDisabled();  // the changelog is never read here; it would only cost time and memory
            if (c.retention != null) {
                materialized = materialized.withRetention(Duration.ofMillis(c.retention));
            }
            switch (emit) {
                case "every":
                    materialized = materialized.withCachingDisabled();
                    break;
                case "update":
                    materialized = materialized.withCachingEnabled();
                    break;
                default:
                    windowed = windowed.emitStrategy(EmitStrategy.onWindowClose());
            }
            table = windowed.aggregate(agg::init, (k, v, a) -> agg.add(a, v), materialized);
        }
        table
            .toStream()
            .process(() -> new Processor<Windowed<String>, String, Void, Void>() {
                @Override
                public void process(final Record<Windowed<String>, String> r) {
                    final Windowed<String> wk = r.key();
                    updates.add(new Update(wk.key(), wk.window().start(), wk.window().end(),
                        r.value() == null ? "null" : agg.finish(r.value()), r.timestamp(), currentIndex[0]));
                }
            });

        final Path stateDir = Files.createTempDirectory(STATE_PARENT, "sw-oracle-" + CASE_COUNTER.incrementAndGet() + "-");
        final Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "sliding-window-oracle");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        if (!ROCKSDB_FLUSH) {
            props.put(StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG, NoFlushRocksDBDslStoreSuppliers.class);
            props.put(StreamsConfig.ROCKSDB_CONFIG_SETTER_CLASS_CONFIG, FastOpenConfigSetter.class);
        }
        double dropped = 0.0;
        try (TopologyTestDriver driver = new TopologyTestDriver(builder.build(), props, Instant.ofEpochMilli(0L))) {
            final TestInputTopic<String, String> in =
                driver.createInputTopic(INPUT_TOPIC, new StringSerializer(), new StringSerializer());
            for (int i = 0; i < c.input.size(); i++) {
                final InRec rec = c.input.get(i);
                currentIndex[0] = i;
                in.pipeInput(rec.key, rec.valueJson, rec.ts);
            }
            currentIndex[0] = c.input.size();
            for (final Map.Entry<MetricName, ? extends Metric> e : driver.metrics().entrySet()) {
                final MetricName n = e.getKey();
                if (n.name().equals("dropped-records-total") && n.group().equals("stream-task-metrics")) {
                    dropped += ((Number) e.getValue().metricValue()).doubleValue();
                }
            }
        } finally {
            deleteRecursively(stateDir);
        }
        return new Result(updates, c.input.size(), dropped);
    }

    static Path stateParent() {
        final String explicit = System.getProperty("oracle.state.parent");
        if (explicit != null && !explicit.isEmpty()) {
            return Path.of(explicit);
        }
        final Path shm = Path.of("/dev/shm");
        if (Files.isDirectory(shm) && Files.isWritable(shm)) {
            return shm;  // RocksDB and the checkpoint files fsync; tmpfs makes that free
        }
        return Path.of(System.getProperty("java.io.tmpdir"));
    }

    static void deleteRecursively(final Path p) {
        if (!Files.exists(p)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(p)) {
            walk.sorted(Comparator.reverseOrder()).forEach(q -> {
                try {
                    Files.deleteIfExists(q);
                } catch (final IOException ignored) {
                    // best effort
                }
            });
        } catch (final IOException ignored) {
            // best effort
        }
    }

    // ------------------------------------------------------------------ JSON in

    /** Raw JSON text of the value the parser is positioned at (its first token), consuming it. */
    static String rawValue(final JsonParser p, final String line) throws IOException {
        final JsonToken t = p.currentToken();
        if (t == JsonToken.VALUE_NULL) {
            return null;
        }
        final int start = (int) p.currentTokenLocation().getCharOffset();
        if (t == JsonToken.VALUE_STRING) {
            p.finishToken();  // strings are parsed lazily; consume the closing quote
        } else {
            p.skipChildren();
        }
        final int end = (int) p.currentLocation().getCharOffset();
        return line.substring(start, end);
    }

    static InRec parseRecord(final JsonParser p, final String line) throws IOException {
        if (p.currentToken() != JsonToken.START_OBJECT) {
            throw new IllegalArgumentException("input record must be a JSON object");
        }
        String key = null;
        String value = null;
        Long ts = null;
        while (p.nextToken() == JsonToken.FIELD_NAME) {
            final String f = p.currentName();
            final JsonToken t = p.nextToken();
            switch (f) {
                case "key":
                    if (t == JsonToken.VALUE_NULL) {
                        key = null;
                    } else if (t == JsonToken.VALUE_STRING) {
                        key = p.getText();
                    } else {
                        throw new IllegalArgumentException("key must be a string or null");
                    }
                    break;
                case "value":
                    value = rawValue(p, line);
                    break;
                case "ts":
                    if (t != JsonToken.VALUE_NUMBER_INT) {
                        throw new IllegalArgumentException("ts must be an integer");
                    }
                    ts = p.getLongValue();
                    break;
                default:
                    p.skipChildren();
            }
        }
        if (ts == null) {
            throw new IllegalArgumentException("record without ts");
        }
        return new InRec(key, value, ts);
    }

    static Case parseCase(final String line) throws IOException {
        final Case c = new Case();
        try (JsonParser p = JSON.createParser(line)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                throw new IllegalArgumentException("case must be a JSON object");
            }
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                final String f = p.currentName();
                p.nextToken();
                switch (f) {
                    case "id": {
                        final String raw = rawValue(p, line);
                        c.idJson = raw == null ? "null" : raw;
                        break;
                    }
                    case "time_difference_ms":
                        c.td = p.getLongValue();
                        break;
                    case "window":
                        c.window = p.getText();
                        break;
                    case "size_ms":
                        c.size = p.getLongValue();
                        break;
                    case "advance_ms":
                        c.advance = p.getLongValue();
                        break;
                    case "gap_ms":
                        c.gap = p.getLongValue();
                        break;
                    case "grace_ms":
                        c.grace = p.getLongValue();
                        break;
                    case "retention_ms":
                        c.retention = p.currentToken() == JsonToken.VALUE_NULL ? null : p.getLongValue();
                        break;
                    case "aggregation":
                        c.aggregation = p.getText();
                        break;
                    case "emit":
                        c.emit = p.getText();
                        break;
                    case "input":
                        if (p.currentToken() != JsonToken.START_ARRAY) {
                            throw new IllegalArgumentException("input must be an array");
                        }
                        while (p.nextToken() != JsonToken.END_ARRAY) {
                            c.input.add(parseRecord(p, line));
                        }
                        break;
                    default:
                        p.skipChildren();
                }
            }
        }
        if (c.aggregation == null) {
            c.aggregation = "collect";
        }
        if (c.emit == null) {
            c.emit = "every";
        }
        return c;
    }

    /** Best-effort id extraction for error lines when the case itself does not parse. */
    static String idOf(final String line) {
        try (JsonParser p = JSON.createParser(line)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                return "null";
            }
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                final String f = p.currentName();
                p.nextToken();
                if (f.equals("id")) {
                    final String raw = rawValue(p, line);
                    return raw == null ? "null" : raw;
                }
                p.skipChildren();
            }
        } catch (final Exception ignored) {
            // fall through
        }
        return "null";
    }

    // ------------------------------------------------------------------ JSON out

    static void appendString(final StringBuilder sb, final String s) {
        sb.append('"');
        JsonStringEncoder.getInstance().quoteAsString(s, sb);
        sb.append('"');
    }

    static void appendUpdate(final StringBuilder sb, final Update u, final boolean withIndex) {
        sb.append("{\"key\":");
        if (u.key == null) {
            sb.append("null");
        } else {
            appendString(sb, u.key);
        }
        sb.append(",\"window_start\":").append(u.start)
            .append(",\"window_end\":").append(u.end)
            .append(",\"value\":").append(u.value)
            .append(",\"ts\":").append(u.ts);
        if (withIndex) {
            sb.append(",\"input_index\":").append(u.inputIndex);
        }
        sb.append('}');
    }

    static String formatCount(final double d) {
        if (d == Math.rint(d) && Math.abs(d) < 1e15) {
            return Long.toString((long) d);
        }
        return Double.toString(d);
    }

    static String errorText(final Throwable t) {
        final StringBuilder sb = new StringBuilder();
        Throwable cur = t;
        while (cur != null) {
            if (sb.length() > 0) {
                sb.append(" / caused by ");
            }
            sb.append(cur.getClass().getName()).append(": ").append(cur.getMessage());
            cur = cur.getCause() == cur ? null : cur.getCause();
        }
        return sb.toString();
    }

    static String runCaseLine(final String line) {
        final StringBuilder sb = new StringBuilder(256);
        Case c = null;
        try {
            c = parseCase(line);
            final Result r = run(c);
            sb.append("{\"id\":").append(c.idJson).append(",\"updates\":[");
            for (int i = 0; i < r.updates.size(); i++) {
                if (i > 0) {
                    sb.append(',');
                }
                appendUpdate(sb, r.updates.get(i), true);
            }
            sb.append("],\"records\":").append(r.records)
                .append(",\"dropped_records_total\":").append(formatCount(r.dropped)).append('}');
            return sb.toString();
        } catch (final Throwable t) {
            final StringWriter sw = new StringWriter();
            t.printStackTrace(new PrintWriter(sw));
            sb.setLength(0);
            sb.append("{\"id\":").append(c != null ? c.idJson : idOf(line)).append(",\"error\":");
            appendString(sb, errorText(t));
            sb.append(",\"stack\":");
            appendString(sb, sw.toString());
            sb.append('}');
            return sb.toString();
        }
    }

    // ------------------------------------------------------------------ main

    static void usage(final String msg) {
        System.err.println("error: " + msg);
        System.err.println("usage: Oracle --batch [--threads N]");
        System.err.println("       Oracle [--window sliding|tumbling|hopping|session] [--size-ms S --advance-ms A"
            + " | --gap-ms G] --time-difference-ms D --grace-ms G --aggregation collect|count|sum|min|max|mean"
            + "|variance|stddev|first|last"
            + " --emit every|update|close [--retention-ms R] [--with-index]   (records as JSON lines on stdin)");
        System.exit(2);
    }

    public static void main(final String[] args) throws Exception {
        boolean batch = false;
        boolean withIndex = false;
        int threads = 1;
        final Case single = new Case();
        for (int i = 0; i < args.length; i++) {
            final String a = args[i];
            switch (a) {
                case "--batch":
                    batch = true;
                    break;
                case "--with-index":
                    withIndex = true;
                    break;
                case "--threads":
                case "--time-difference-ms":
                case "--grace-ms":
                case "--aggregation":
                case "--emit":
                case "--retention-ms":
                case "--window":
                case "--size-ms":
                case "--advance-ms":
                case "--gap-ms":
                    if (i + 1 >= args.length) {
                        usage("missing value for " + a);
                    }
                    final String v = args[++i];
                    switch (a) {
                        case "--threads":
                            threads = Integer.parseInt(v);
                            break;
                        case "--time-difference-ms":
                            single.td = Long.parseLong(v);
                            break;
                        case "--grace-ms":
                            single.grace = Long.parseLong(v);
                            break;
                        case "--aggregation":
                            single.aggregation = v;
                            break;
                        case "--retention-ms":
                            single.retention = Long.parseLong(v);
                            break;
                        case "--window":
                            single.window = v;
                            break;
                        case "--size-ms":
                            single.size = Long.parseLong(v);
                            break;
                        case "--advance-ms":
                            single.advance = Long.parseLong(v);
                            break;
                        case "--gap-ms":
                            single.gap = Long.parseLong(v);
                            break;
                        default:
                            single.emit = v;
                    }
                    break;
                default:
                    usage("unknown argument " + a);
            }
        }
        final BufferedReader reader = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8), 1 << 16);
        final Writer out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        if (batch) {
            runBatch(reader, out, Math.max(1, threads));
        } else {
            if (single.grace < 0 || single.aggregation == null || single.emit == null) {
                usage("single-case mode needs the window's lengths, --grace-ms, --aggregation and --emit");
            }
            runSingle(single, reader, out, withIndex);
        }
    }

    static void runSingle(final Case c, final BufferedReader reader, final Writer out, final boolean withIndex)
        throws IOException {
        String line;
        while ((line = reader.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            try (JsonParser p = JSON.createParser(line)) {
                p.nextToken();
                c.input.add(parseRecord(p, line));
            }
        }
        final Result r;
        try {
            r = run(c);
        } catch (final Exception e) {
            final StringBuilder sb = new StringBuilder("{\"error\":");
            appendString(sb, errorText(e));
            sb.append('}');
            System.err.println(sb);
            System.exit(1);
            return;
        }
        final StringBuilder sb = new StringBuilder(128);
        for (final Update u : r.updates) {
            sb.setLength(0);
            appendUpdate(sb, u, withIndex);
            sb.append('\n');
            out.write(sb.toString());
        }
        out.flush();
        System.err.println("{\"records\":" + r.records + ",\"dropped_records_total\":" + formatCount(r.dropped) + "}");
        System.err.flush();
    }

    static void runBatch(final BufferedReader reader, final Writer out, final int threads) throws Exception {
        final long t0 = System.nanoTime();
        long cases = 0;
        long errors = 0;
        final ExecutorService pool = threads > 1 ? Executors.newFixedThreadPool(threads) : null;
        final Deque<Future<String>> pending = new ArrayDeque<>();
        String line;
        while ((line = reader.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            cases++;
            final String l = line;
            if (pool == null) {
                final String res = runCaseLine(l);
                if (!res.contains("\"updates\":")) {
                    errors++;
                }
                out.write(res);
                out.write('\n');
                out.flush();
            } else {
                pending.add(pool.submit(() -> runCaseLine(l)));
                while (pending.size() > 4 * threads || (!pending.isEmpty() && pending.peek().isDone())) {
                    final String res = pending.poll().get();
                    if (!res.contains("\"updates\":")) {
                        errors++;
                    }
                    out.write(res);
                    out.write('\n');
                    if (pending.isEmpty() || !pending.peek().isDone()) {
                        out.flush();
                    }
                }
            }
        }
        while (!pending.isEmpty()) {
            final String res = pending.poll().get();
            if (!res.contains("\"updates\":")) {
                errors++;
            }
            out.write(res);
            out.write('\n');
        }
        out.flush();
        if (pool != null) {
            pool.shutdown();
        }
        final double secs = (System.nanoTime() - t0) / 1e9;
        System.err.println("{\"batch_cases\":" + cases + ",\"errors\":" + errors + ",\"seconds\":" + secs
            + ",\"cases_per_second\":" + (secs > 0 ? cases / secs : 0) + ",\"threads\":" + threads + "}");
        System.err.flush();
    }
}
