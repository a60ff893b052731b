package dev.sonde.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.newsclub.net.unix.AFUNIXDatagramChannel;
import org.newsclub.net.unix.AFUNIXSocketAddress;

/** The unixgram transport (through junixsocket), against a receiver in the test. */
class UnixTransportTest {
    private static final Duration WAIT = Duration.ofSeconds(10);

    /** A unix datagram receiver bound to a path, read without blocking. */
    private static final class Receiver implements AutoCloseable {
        final AFUNIXDatagramChannel ch;

        Receiver(Path path) throws IOException {
            ch = AFUNIXDatagramChannel.open();
            ch.bind(AFUNIXSocketAddress.of(path));
            ch.configureBlocking(false);
        }

        List<List<String>> poll() {
            List<List<String>> out = new ArrayList<>();
            ByteBuffer buf = ByteBuffer.allocate(65536);
            try {
                for (;;) {
                    buf.clear();
                    // junixsocket returns null, not the address, for a
                    // sender without a bound name, so look at the data.
                    ch.receive(buf);
                    if (buf.position() == 0) {
                        break;
                    }
                    out.addAll(Msgpack.decode(Arrays.copyOf(buf.array(), buf.position())));
                }
            } catch (IOException e) {
                throw new AssertionError(e);
            }
            return out;
        }

        @Override
        public void close() throws IOException {
            ch.close();
        }
    }

    private static SondeClient client(Path path) {
        return SondeClient.builder().address("unixgram://" + path).flushInterval(Duration.ofHours(1)).build();
    }

    @Test
    void points_arrive_over_a_unix_datagram_socket() throws Exception {
        Path path = Files.createTempDirectory("sonde-java").resolve("m.sock");
        try (Receiver rx = new Receiver(path); SondeClient c = client(path)) {
            c.histogram("size", 0.5, Tag.of("k", "v"));
            c.store("depth", 3);
            c.flush();
            List<List<String>> got = Wait.forValue("messages", WAIT, () -> {
                List<List<String>> m = rx.poll();
                return m.isEmpty() ? null : m;
            });
            assertEquals(List.of(List.of("emit", "histogram", "size", "0.5", "k=v", ""),
                    List.of("emit", "store", "depth", "3", "", "")), got);
        } finally {
            Files.deleteIfExists(path);
        }
    }

    @Test
    void a_replaced_socket_file_is_found_again_after_send_errors(@TempDir Path dir) throws Exception {
        Path path = dir.resolve("m.sock");
        Receiver rx = new Receiver(path);
        try (SondeClient c = client(path)) {
            c.counter("before", 1);
            c.flush();
            Wait.until("the first point", WAIT, () -> rx.poll().stream().anyMatch(m -> m.get(2).equals("before")));

            rx.close();
            Files.delete(path);
            c.counter("lost", 1);
            c.flush();
            assertEquals(1, c.sendErrors(), "sending to a closed socket fails");
            c.counter("lost", 1);
            c.flush();
            assertEquals(2, c.sendErrors(), "reconnecting to a missing file fails too");

            try (Receiver again = new Receiver(path)) {
                c.counter("after", 1);
                c.flush();
                assertEquals(2, c.sendErrors());
                Wait.until("a point through the new socket", WAIT,
                        () -> again.poll().stream().anyMatch(m -> m.get(2).equals("after")));
            }
        } finally {
            rx.close();
        }
    }

    @Test
    void a_receiver_that_never_reads_costs_bounded_waits_not_a_hang(@TempDir Path dir) throws Exception {
        Path path = dir.resolve("m.sock");
        try (Receiver rx = new Receiver(path); SondeClient c = client(path)) {
            // Linux queues net.unix.max_dgram_qlen (10 by default) datagrams
            // per unix socket; past that each send waits 100 ms, then fails.
            int sends = maxDgramQlen() + 6;
            long start = System.nanoTime();
            for (int i = 0; i < sends; i++) {
                c.counter("n" + i, 1);
                c.flush();
            }
            long ms = (System.nanoTime() - start) / 1_000_000;
            long errors = c.sendErrors();
            assertTrue(errors > 0 && errors < sends, errors + " send errors of " + sends + " in " + ms + " ms");
            assertTrue(ms < 60_000, "took " + ms + " ms");
            int received = rx.poll().size();
            assertEquals(sends - errors, received, "every send that did not fail arrived");

            // Once the receiver reads again, sends go through on the same socket.
            c.counter("later", 1);
            c.flush();
            assertEquals(errors, c.sendErrors());
            assertTrue(rx.poll().stream().anyMatch(m -> m.get(2).equals("later")));
        }
    }

    /** The kernel's per-socket datagram queue length; skips the test where it is unknown or huge. */
    private static int maxDgramQlen() throws IOException {
        Path p = Path.of("/proc/sys/net/unix/max_dgram_qlen");
        Assumptions.assumeTrue(Files.isReadable(p), "no " + p);
        // One buffered read from offset 0: a sysctl file answers nothing to a
        // read at a later offset, and Files.readString reads a size-0 file
        // a byte at a time first (it would see "1" for "10").
        int qlen;
        try (java.io.BufferedReader r = Files.newBufferedReader(p)) {
            qlen = Integer.parseInt(r.readLine().trim());
        }
        Assumptions.assumeTrue(qlen <= 1000, "max_dgram_qlen " + qlen + " is too large to fill quickly");
        return qlen;
    }

    @Test
    void a_burst_larger_than_the_kernel_queue_is_delivered_to_a_reader_that_keeps_up(@TempDir Path dir)
            throws Exception {
        Path path = dir.resolve("m.sock");
        try (Receiver rx = new Receiver(path); SondeClient c = client(path)) {
            List<List<String>> got = new ArrayList<>();
            Thread reader = new Thread(() -> {
                long deadline = System.nanoTime() + WAIT.toNanos();
                while (got.size() < 60 && System.nanoTime() < deadline) {
                    List<List<String>> m = rx.poll();
                    synchronized (got) {
                        got.addAll(m);
                    }
                    Thread.onSpinWait();
                }
            });
            reader.start();
            for (int i = 0; i < 60; i++) {
                c.counter("n", 1, Tag.of("i", Integer.toString(i)));
                c.flush();
            }
            reader.join();
            assertEquals(0, c.sendErrors());
            assertEquals(60, got.size());
        }
    }
}
