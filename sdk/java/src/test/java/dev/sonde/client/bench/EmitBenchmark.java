package dev.sonde.client.bench;

import dev.sonde.client.SondeClient;
import dev.sonde.client.Tag;
import dev.sonde.client.Timing;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.DatagramChannel;
import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;

/**
 * What one emit costs the calling thread, in nanoseconds and allocated
 * bytes, and what the flusher then spends per point. Not part of
 * {@code mvn test}; run it with
 *
 * <pre>mvn -B -q -Pbench test-compile exec:exec</pre>
 *
 * <p>Each case emits a batch of points (10,000, the default buffer size)
 * in a timed loop, then calls {@code flush()} outside the timing (so the
 * buffer never fills and no emit takes the drop path), 200 batches per
 * round. Two rounds warm the JIT up; the next seven are reported as
 * median, min and max. {@code -Dbench.batch=N}, {@code -Dbench.batches=N}
 * and {@code -Dbench.rounds=N} change those numbers. Allocation is read from
 * {@code com.sun.management.ThreadMXBean#getThreadAllocatedBytes} for the
 * emitting thread only. Points go over UDP to a loopback socket that a
 * background thread drains, as they would to a local agent.
 */
public final class EmitBenchmark {
    static final int BATCH = Integer.getInteger("bench.batch", 10_000);
    static final int BATCHES = Integer.getInteger("bench.batches", 200);
    static final int WARMUP_ROUNDS = 2;
    static final int ROUNDS = Integer.getInteger("bench.rounds", 7);

    private static final Tag HOST = Tag.of("host", "web-17");
    private static final Tag DC = Tag.of("dc", "eu-west");
    private static final Tag SVC = Tag.of("svc", "checkout");

    /** 500 series emitted in turn, as a hot loop over many keys would. */
    private static final String[] SERIES = new String[500];

    static {
        for (int i = 0; i < SERIES.length; i++) {
            SERIES[i] = "bench.requests." + i;
        }
    }

    private static final com.sun.management.ThreadMXBean THREADS =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();

    /** One measured case: emit point number {@code i}. */
    private interface Emit {
        void run(SondeClient c, int i);
    }

    private EmitBenchmark() {}

    /**
     * Runs every case and prints one line each.
     *
     * @param args ignored; see the class comment for the properties
     * @throws IOException if the loopback socket cannot be opened
     */
    public static void main(String[] args) throws IOException {
        // A bound socket that nobody reads: sends succeed (the kernel drops
        // what does not fit its queue), and no receiving thread competes
        // with the measured one for the CPU.
        DatagramChannel sink = DatagramChannel.open();
        sink.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int port = ((InetSocketAddress) sink.getLocalAddress()).getPort();
        System.out.printf(Locale.ROOT, "java %s, %s, %d CPUs; %d x %d emits per round, median of %d rounds%n",
                System.getProperty("java.version"), System.getProperty("java.vm.name"),
                Runtime.getRuntime().availableProcessors(), BATCHES, BATCH, ROUNDS);
        System.out.printf(Locale.ROOT, "%-44s %10s %10s %10s %12s %14s%n",
                "case", "ns/emit", "min", "max", "bytes/emit", "flush ns/pt");

        run(port, "counter, 3 tags (static final Tag)", (c, i) -> c.counter("bench.requests", 1, HOST, DC, SVC));
        run(port, "counter, 3 tags (Tag.of per call)", (c, i) -> c.counter("bench.requests", 1,
                Tag.of("host", "web-17"), Tag.of("dc", "eu-west"), Tag.of("svc", "checkout")));
        run(port, "counter, 3 tags, 500 series", (c, i) -> c.counter(SERIES[i % SERIES.length], 1, HOST, DC, SVC));
        run(port, "store, 3 tags", (c, i) -> c.store("bench.depth", 7, HOST, DC, SVC));
        run(port, "timer, 3 tags, value 12.5", (c, i) -> c.timer("bench.latency", 12.5, HOST, DC, SVC));
        run(port, "timer, 3 tags, integral ms value", (c, i) -> c.timer("bench.latency", i & 1023, HOST, DC, SVC));
        run(port, "time() try-with-resources, 3 tags", (c, i) -> {
            try (Timing t = c.time("bench.block", HOST, DC, SVC)) {
                t.elapsedMillis();
            }
        });
        sink.close();
    }

    private static void run(int port, String name, Emit emit) {
        try (SondeClient c = SondeClient.builder().address("udp://127.0.0.1:" + port).prefix("bench")
                .bufferSize(BATCH).flushInterval(Duration.ofHours(1)).build()) {
            long tid = Thread.currentThread().getId();
            double[] ns = new double[ROUNDS];
            double[] bytes = new double[ROUNDS];
            double[] flushNs = new double[ROUNDS];
            for (int round = -WARMUP_ROUNDS; round < ROUNDS; round++) {
                long emitNanos = 0;
                long flushNanos = 0;
                long allocated = 0;
                for (int b = 0; b < BATCHES; b++) {
                    long a0 = THREADS.getThreadAllocatedBytes(tid);
                    long t0 = System.nanoTime();
                    for (int i = 0; i < BATCH; i++) {
                        emit.run(c, i);
                    }
                    long t1 = System.nanoTime();
                    long a1 = THREADS.getThreadAllocatedBytes(tid);
                    c.flush();
                    long t2 = System.nanoTime();
                    emitNanos += t1 - t0;
                    flushNanos += t2 - t1;
                    allocated += a1 - a0;
                }
                if (round >= 0) {
                    long n = (long) BATCH * BATCHES;
                    ns[round] = (double) emitNanos / n;
                    bytes[round] = (double) allocated / n;
                    flushNs[round] = (double) flushNanos / n;
                }
            }
            if (c.dropped() != 0) {
                throw new AssertionError(name + ": " + c.dropped() + " points dropped; the numbers would be wrong");
            }
            double[] sorted = ns.clone();
            Arrays.sort(sorted);
            System.out.printf(Locale.ROOT, "%-44s %10.1f %10.1f %10.1f %12.1f %14.1f%n",
                    name, median(ns), sorted[0], sorted[ROUNDS - 1], median(bytes), median(flushNs));
        }
    }

    private static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s[s.length / 2];
    }
}
