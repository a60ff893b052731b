package dev.sonde.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.DatagramPacket;
import java.net.DatagramSocket;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The real UDP transport, against a receiver in the test. */
class UdpTransportTest {
    private static final Duration WAIT = Duration.ofSeconds(10);

    /** A loopback UDP receiver that collects message names. */
    private static final class Receiver implements AutoCloseable {
        final DatagramSocket socket;

        Receiver(int port) throws IOException {
            socket = new DatagramSocket(null);
            socket.setReuseAddress(true);
            socket.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
            socket.setSoTimeout(20);
        }

        int port() {
            return socket.getLocalPort();
        }

        /** Every message that arrives within a short poll. */
        List<List<String>> poll() {
            List<List<String>> out = new ArrayList<>();
            byte[] buf = new byte[65536];
            for (;;) {
                DatagramPacket p = new DatagramPacket(buf, buf.length);
                try {
                    socket.receive(p);
                } catch (SocketTimeoutException e) {
                    return out;
                } catch (IOException e) {
                    throw new AssertionError(e);
                }
                out.addAll(Msgpack.decode(Arrays.copyOf(p.getData(), p.getLength())));
            }
        }

        @Override
        public void close() {
            socket.close();
        }
    }

    private static boolean hasName(List<List<String>> messages, String name) {
        return messages.stream().anyMatch(m -> m.get(2).equals(name));
    }

    @Test
    void points_arrive_over_udp_as_the_wire_format_says() throws Exception {
        try (Receiver rx = new Receiver(0);
                SondeClient c = SondeClient.builder().address("udp://127.0.0.1:" + rx.port()).prefix("svc")
                        .flushInterval(Duration.ofHours(1)).build()) {
            c.counter("hits", 2, Tag.of("host", "a"));
            c.tsStore("daily", 42, 1_763_800_200L);
            c.flush();
            List<List<String>> got = Wait.forValue("two messages", WAIT, () -> {
                List<List<String>> m = rx.poll();
                return m.isEmpty() ? null : m;
            });
            assertEquals(List.of(List.of("emit", "counter", "svc.hits", "2", "host=a", ""),
                    List.of("emit", "ts_store", "svc.daily", "42", "", "1763800200")), got);
            assertEquals(0, c.sendErrors());
        }
    }

    @Test
    void a_restarted_receiver_is_found_again_after_send_errors() throws Exception {
        Receiver rx = new Receiver(0);
        int port = rx.port();
        try (SondeClient c = SondeClient.builder().address("udp://127.0.0.1:" + port)
                .flushInterval(Duration.ofHours(1)).build()) {
            c.counter("before", 1);
            c.flush();
            Wait.until("the first point", WAIT, () -> hasName(rx.poll(), "before"));

            rx.close();
            // Nobody listens now: the kernel answers with ICMP port
            // unreachable, which the connected socket reports on a later send.
            Wait.until("a send error while the receiver is gone", WAIT, () -> {
                c.counter("lost", 1);
                c.flush();
                return c.sendErrors() > 0;
            });
            long errors = c.sendErrors();

            try (Receiver again = new Receiver(port)) {
                Wait.until("a point through the reopened socket", WAIT, () -> {
                    c.counter("after", 1);
                    c.flush();
                    return hasName(again.poll(), "after");
                });
            }
            assertTrue(c.sendErrors() >= errors);
        } finally {
            rx.close();
        }
    }
}
