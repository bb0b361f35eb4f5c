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
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SlidingWindows;

/**
 * The benchmark's Kafka Streams peer: SlidingWindows(td, grace) count + sum(amount) per Kafka key, emitted as updates
 * through the default record cache (flushed on commit or when full), written as JSON to the output topic.
 *
 * <p>Args: bootstrap inputTopic outputTopic tdMs graceMs threads commitIntervalMs stateDir applicationId
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

        StreamsBuilder b = new StreamsBuilder();
        b.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
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
                .groupByKey(Grouped.with(Serdes.String(), Serdes.ByteArray()))
                .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(td), Duration.ofMillis(grace)))
                .aggregate(() -> agg(0, 0, 0), (k, v, a) -> {
                    ByteBuffer x = ByteBuffer.wrap(v), y = ByteBuffer.wrap(a);
                    return agg(y.getLong(0) + 1, y.getLong(8) + x.getLong(8), Math.max(y.getLong(16), x.getLong(16)));
                }, Materialized.with(Serdes.String(), Serdes.ByteArray()))
                .toStream()
                .map((wk, a) -> {
                    ByteBuffer y = ByteBuffer.wrap(a);
                    String key = wk.key();
                    long start = wk.window().start(), end = wk.window().end();
                    String json = "{\"key\":" + JSON.valueToTree(key) + ",\"window_start\":" + start
                            + ",\"window_end\":" + end + ",\"count\":" + y.getLong(0) + ",\"sum_amount\":"
                            + y.getLong(8) + ",\"max_sent\":" + y.getLong(16) + "}";
                    return KeyValue.pair(key + "@" + start, json);
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
