package slidingwindow.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;

/**
 * The benchmark's Kafka Streams peer: count + sum(amount) per Kafka key over SlidingWindows(td, grace) - or, with
 * the optional window arguments, TimeWindows (tumbling: size; hopping: size and advance) or SessionWindows (gap) -
 * emitted as updates through the default record cache (flushed on commit or when full), written as JSON to the
 * output topic; a session replaced by a merge is forwarded as a tombstone (null value).
 *
 * <p>Args: bootstrap inputTopic outputTopic tdMs graceMs threads commitIntervalMs stateDir applicationId
 * [window sizeMs advanceMs gapMs], window one of sliding (td), tumbling (size), hopping (size, advance), session (gap).
 *
 * <p>The value also carries max_sent (largest "sent" field of the window's records, the producer's wall clock) so the
 * driver can measure end-to-end latency. Prints "consumed N" to stdout every 250 ms (records seen by the source).
 */
public final class KStreamsApp {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final AtomicLong CONSUMED = new AtomicLong();

    private KStreamsApp() {}

    /** count, sum, max_sent as 24 bytes. */
    static byte[] agg(long count, long sum, long maxSent) {
        return ByteBuffer.allocate(24).putLong(count).putLong(sum).putLong(maxSent).array();
    }

    /** One record folded into an aggregate (count, sum, max_sent). */
    static byte[] add(String key, byte[] value, byte[] aggregate) {
        ByteBuffer x = ByteBuffer.wrap(value), y = ByteBuffer.wrap(aggregate);
        return agg(y.getLong(0) + 1, y.getLong(8) + x.getLong(8), Math.max(y.getLong(16), x.getLong(16)));
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], in = args[1], out = args[2];
        long td = Long.parseLong(args[3]), grace = Long.parseLong(args[4]);
        int threads = Integer.parseInt(args[5]);
        long commitMs = Long.parseLong(args[6]);
        String stateDir = args[7], appId = args[8];

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        p.put("auto.offset.reset", "earliest");

        String window = args.length > 9 ? args[9] : "sliding";
        long size = args.length > 10 ? Long.parseLong(args[10]) : td;
        long advance = args.length > 11 ? Long.parseLong(args[11]) : size;
        long gap = args.length > 12 ? Long.parseLong(args[12]) : td;

        StreamsBuilder b = new StreamsBuilder();
        KGroupedStream<String, byte[]> grouped = b.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
                .peek((k, v) -> CONSUMED.incrementAndGet())
                .mapValues(v -> {
                    try {
                        JsonNode n = JSON.readTree(v);
                        return agg(1, n.path("amount").asLong(), n.path("sent").asLong());
                    } catch (Exception e) {
                        return null;
                    }
                })
                .filter((k, v) -> v != null)
                .groupByKey(Grouped.with(Serdes.String(), Serdes.ByteArray()));
        KTable<Windowed<String>, byte[]> table;
        switch (window) {
            case "sliding":
                table = grouped.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(td),
                                Duration.ofMillis(grace)))
                        .aggregate(() -> agg(0, 0, 0), KStreamsApp::add,
                                Materialized.with(Serdes.String(), Serdes.ByteArray()));
                break;
            case "tumbling":
            case "hopping":
                table = grouped.windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(size), Duration.ofMillis(grace))
                                .advanceBy(Duration.ofMillis("tumbling".equals(window) ? size : advance)))
                        .aggregate(() -> agg(0, 0, 0), KStreamsApp::add,
                                Materialized.with(Serdes.String(), Serdes.ByteArray()));
                break;
            case "session":
                table = grouped.windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(gap),
                                Duration.ofMillis(grace)))
                        .aggregate(() -> agg(0, 0, 0), KStreamsApp::add, (k, a1, a2) -> {
                            ByteBuffer x = ByteBuffer.wrap(a1), y = ByteBuffer.wrap(a2);
                            return agg(x.getLong(0) + y.getLong(0), x.getLong(8) + y.getLong(8),
                                    Math.max(x.getLong(16), y.getLong(16)));
                        }, Materialized.with(Serdes.String(), Serdes.ByteArray()));
                break;
            default:
                throw new IllegalArgumentException("window must be sliding, tumbling, hopping or session: " + window);
        }
        table.toStream()
                .map((wk, a) -> {
                    String key = wk.key();
                    long start = wk.window().start(), end = wk.window().end();
                    // a session is named by its start and end; a time or sliding window by its start
                    String outKey = key + "@" + start + ("session".equals(window) ? "@" + end : "");
                    if (a == null) { // a session replaced by a merge
                        return KeyValue.pair(outKey, (String) null);
                    }
                    ByteBuffer y = ByteBuffer.wrap(a);
                    String json = "{\"key\":" + JSON.valueToTree(key) + ",\"window_start\":" + start
                            + ",\"window_end\":" + end + ",\"count\":" + y.getLong(0) + ",\"sum_amount\":"
                            + y.getLong(8) + ",\"max_sent\":" + y.getLong(16) + "}";
                    return KeyValue.pair(outKey, json);
                })
                .to(out, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(10));
            done.countDown();
        }));
        Thread reporter = new Thread(() -> {
            try {
                while (true) {
                    System.out.println("consumed " + CONSUMED.get());
                    System.out.flush();
                    Thread.sleep(250);
                }
            } catch (InterruptedException e) {
                // exit
            }
        });
        reporter.setDaemon(true);
        streams.start();
        reporter.start();
        done.await();
    }
}
