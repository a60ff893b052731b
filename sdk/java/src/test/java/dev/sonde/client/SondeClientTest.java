package dev.sonde.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.Test;

/** Client behaviour of SPEC.md, against an in-memory transport. */
class SondeClientTest {
    private static final Duration WAIT = Duration.ofSeconds(10);
    private static final Duration NEVER = Duration.ofHours(1);

    private final CapturingTransport capture = new CapturingTransport();

    private SondeClient.Builder builder() {
        return SondeClient.builder().address("udp://127.0.0.1:9").transportFactory(capture).flushInterval(NEVER);
    }

    private static List<String> msg(String type, String name, String value, String tags, String ts) {
        return List.of("emit", type, name, value, tags, ts);
    }

    @Test
    void the_prefix_is_joined_to_every_name_with_a_dot() {
        try (SondeClient c = builder().prefix("app").build()) {
            c.counter("hits", 1);
            c.timer("db.query", 2.5);
            c.flush();
        }
        assertEquals(List.of(msg("counter", "app.hits", "1", "", ""), msg("timer", "app.db.query", "2.5", "", "")),
                capture.messages());
    }

    @Test
    void without_a_prefix_the_name_is_sent_alone() {
        try (SondeClient c = builder().build()) {
            assertEquals("", c.prefix());
            c.store("pool.size", 3);
            c.flush();
        }
        assertEquals(List.of(msg("store", "pool.size", "3", "", "")), capture.messages());
    }

    @Test
    void tags_are_sent_in_the_callers_order_and_maps_sorted_by_key() {
        Map<String, String> unordered = new HashMap<>();
        for (String k : List.of("zone", "app", "host", "m")) {
            unordered.put(k, k.toUpperCase());
        }
        TreeMap<String, String> reversed = new TreeMap<>(java.util.Comparator.reverseOrder());
        reversed.putAll(Map.of("a", "1", "b", "2"));
        try (SondeClient c = builder().build()) {
            c.timer("t", 1, Tag.of("host", "a"), Tag.of("dc", "x"), Tag.of("empty", ""));
            c.timer("t", 2, unordered);
            c.timer("t", 3, reversed);
            c.timer("t", 4, Map.of());
            c.timer("t", 5);
            c.flush();
        }
        assertEquals(List.of(
                msg("timer", "t", "1", "host=a|dc=x|empty=", ""),
                msg("timer", "t", "2", "app=APP|host=HOST|m=M|zone=ZONE", ""),
                msg("timer", "t", "3", "a=1|b=2", ""),
                msg("timer", "t", "4", "", ""),
                msg("timer", "t", "5", "", "")), capture.messages());
    }

    @Test
    void counters_are_summed_and_stores_replaced_within_a_flush_where_the_first_was() {
        try (SondeClient c = builder().build()) {
            c.counter("a", 1, Tag.of("h", "x"));
            c.store("s", 7);
            c.counter("b", 10);
            c.counter("a", 2, Tag.of("h", "x"));
            c.rateCounter("a", 4, Tag.of("h", "x"));   // another type: another series
            c.counter("a", 8, Tag.of("h", "y"));       // other tags: another series
            c.counter("a", 0.5, Map.of("h", "x"));     // same rendered tags: same series
            c.rateCounter("a", 16, Tag.of("h", "x"));
            c.store("s", 9);                           // a store replaces the pending value
            c.meter("m", 1);
            c.meter("m", 1);                           // nor meters
            c.flush();
            c.counter("a", 100, Tag.of("h", "x"));     // a new flush starts new sums
            c.flush();
        }
        assertEquals(List.of(
                msg("counter", "a", "3.5", "h=x", ""),
                msg("store", "s", "9", "", ""),
                msg("counter", "b", "10", "", ""),
                msg("rate_counter", "a", "20", "h=x", ""),
                msg("counter", "a", "8", "h=y", ""),
                msg("meter", "m", "1", "", ""),
                msg("meter", "m", "1", "", ""),
                msg("counter", "a", "100", "h=x", "")), capture.messages());
    }

    @Test
    void tag_order_is_part_of_the_summed_series_as_sent() {
        // SPEC.md sums by *rendered* tags; the agent merges the two series later.
        try (SondeClient c = builder().build()) {
            c.counter("a", 1, Tag.of("x", "1"), Tag.of("y", "2"));
            c.counter("a", 1, Tag.of("y", "2"), Tag.of("x", "1"));
            c.flush();
        }
        assertEquals(2, capture.messages().size());
    }

    @Test
    void ts_store_sends_its_timestamp_and_every_other_type_an_empty_ts() {
        try (SondeClient c = builder().build()) {
            c.tsStore("billing.daily", 42, 1_763_800_200L);
            c.store("x", 1);
            c.histogram("h", 0.25);
            c.flush();
        }
        assertEquals(List.of(
                msg("ts_store", "billing.daily", "42", "", "1763800200"),
                msg("store", "x", "1", "", ""),
                msg("histogram", "h", "0.25", "", "")), capture.messages());
    }

    @Test
    void one_pending_emit_is_sent_as_a_bare_message_and_more_as_one_bunch() {
        try (SondeClient c = builder().build()) {
            c.counter("one", 1);
            c.flush();
            c.counter("two", 1);
            c.counter("three", 1);
            c.flush();
        }
        List<byte[]> d = capture.datagrams();
        assertEquals(2, d.size());
        assertEquals(0x96, d.get(0)[0] & 0xff, "a lone message is a fixarray");
        assertEquals(0xdc, d.get(1)[0] & 0xff, "two messages are an array16 bunch");
        assertEquals(2, ((d.get(1)[1] & 0xff) << 8) | (d.get(1)[2] & 0xff));
    }

    @Test
    void bunches_stay_under_32_kib_are_filled_before_splitting_and_keep_every_message_in_order() {
        int n = 3000;
        String tagValue = "v".repeat(60);
        try (SondeClient c = builder().bufferSize(n).build()) {
            for (int i = 0; i < n; i++) {
                c.timer("service.latency", i, Tag.of("seq", Integer.toString(i)), Tag.of("pad", tagValue));
            }
            c.flush();
            assertEquals(0, c.dropped());
        }
        List<byte[]> datagrams = capture.datagrams();
        assertTrue(datagrams.size() >= 5, "expected several bunches, got " + datagrams.size());
        List<List<String>> all = new ArrayList<>();
        for (int i = 0; i < datagrams.size(); i++) {
            byte[] d = datagrams.get(i);
            assertTrue(d.length < 32 * 1024, "datagram " + i + " is " + d.length + " bytes");
            List<List<String>> messages = Msgpack.decode(d);
            if (i < datagrams.size() - 1) {
                // Split only when the next message would not have fitted.
                int next = Msgpack.hex(encode(datagrams.get(i + 1))).length() / 2;
                assertTrue(d.length + next >= 32 * 1024, "datagram " + i + " was split early at " + d.length);
            }
            all.addAll(messages);
        }
        assertEquals(n, all.size());
        for (int i = 0; i < n; i++) {
            assertEquals(Integer.toString(i), all.get(i).get(3), "message " + i + " out of order");
        }
    }

    @Test
    void a_message_too_large_for_any_bunch_is_sent_alone_in_order() {
        String huge = "x".repeat(40_000);
        try (SondeClient c = builder().build()) {
            c.store("before", 1);
            c.store("big", 2, Tag.of("blob", huge));
            c.store("after", 3);
            c.flush();
        }
        List<byte[]> d = capture.datagrams();
        assertEquals(3, d.size());
        assertTrue(d.get(1).length > 40_000);
        assertEquals(List.of("before", "big", "after"),
                List.of(Msgpack.decode(d.get(0)).get(0).get(2), Msgpack.decode(d.get(1)).get(0).get(2),
                        Msgpack.decode(d.get(2)).get(0).get(2)));
        assertEquals("blob=" + huge, Msgpack.decode(d.get(1)).get(0).get(4), "a str16 field");
    }

    /** The bytes of the first message of a datagram. */
    private static byte[] encode(byte[] datagram) {
        List<String> m = Msgpack.decode(datagram).get(0);
        MsgpackWriter w = new MsgpackWriter();
        w.writeMessage(MetricType.fromWireName(m.get(1)).encoded, m.get(2), m.get(3), m.get(4), m.get(5));
        return java.util.Arrays.copyOf(w.array(), w.size());
    }

    @Test
    void a_full_buffer_drops_and_counts_points_without_blocking_the_caller() throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        capture.gate = gate;
        try (SondeClient c = builder().bufferSize(4).build()) {
            for (int i = 0; i < 4; i++) {
                c.timer("s", i);
            }
            // The fourth emit filled the buffer and woke the flusher, which
            // drained all four and is now stuck sending them.
            capture.sendEntered.await();
            for (int i = 4; i < 8; i++) {
                c.timer("s", i);
            }
            assertEquals(0, c.dropped(), "the drained slots were free again");
            long start = System.nanoTime();
            for (int i = 8; i < 11; i++) {
                c.timer("s", i);
            }
            long tookMs = (System.nanoTime() - start) / 1_000_000;
            assertEquals(3, c.dropped());
            assertTrue(tookMs < 1000, "emits into a full buffer took " + tookMs + " ms");
            gate.countDown();
            c.flush();
        }
        List<String> values = new ArrayList<>();
        for (List<String> m : capture.messages()) {
            values.add(m.get(3));
        }
        assertEquals(List.of("0", "1", "2", "3", "4", "5", "6", "7"), values);
    }

    @Test
    void a_hot_loop_over_fewer_series_than_the_buffer_holds_drops_nothing() {
        // 501 series in 502 entries: the buffer never fills, so nothing is
        // sent before flush(), and every emit after the first of its series
        // must take no room.
        try (SondeClient c = builder().bufferSize(502).build()) {
            for (int i = 0; i < 20_000; i++) {
                c.counter("hits." + (i % 500), 1);
                c.store("depth", i);
            }
            assertEquals(0, c.dropped());
            assertEquals(0, capture.messages().size(), "nothing sent before flush()");
            c.flush();
        }
        Map<String, String> got = new HashMap<>();
        for (List<String> m : capture.messages()) {
            got.put(m.get(2), m.get(3));
        }
        Map<String, String> want = new HashMap<>();
        for (int i = 0; i < 500; i++) {
            want.put("hits." + i, "40");
        }
        want.put("depth", "19999");
        assertEquals(want, got);
    }

    @Test
    void a_full_buffer_is_sent_at_once_without_waiting_for_the_interval() {
        try (SondeClient c = builder().bufferSize(50).build()) {
            for (int i = 0; i < 50; i++) {
                c.timer("s", i);
            }
            Wait.until("the full buffer to be sent", WAIT, () -> capture.messages().size() == 50);
        }
    }

    @Test
    void the_flusher_sends_every_interval_without_an_explicit_flush() {
        try (SondeClient c = builder().flushInterval(Duration.ofMillis(200)).build()) {
            c.counter("tick", 1);
            Wait.until("the first interval's flush", WAIT, () -> capture.messages().size() == 1);
            c.counter("tick", 1);
            Wait.until("the second interval's flush", WAIT, () -> capture.messages().size() == 2);
            assertEquals(2, capture.datagrams().size(), "one flush per interval, not one send per emit");
        }
    }

    @Test
    void the_default_flush_interval_is_200_ms() {
        // Checked through behaviour: a point is sent within a few intervals
        // though nobody calls flush().
        try (SondeClient c = SondeClient.builder().address("udp://127.0.0.1:9").transportFactory(capture).build()) {
            long start = System.nanoTime();
            c.counter("tick", 1);
            Wait.until("the background flush", WAIT, () -> capture.messages().size() == 1);
            long ms = (System.nanoTime() - start) / 1_000_000;
            assertTrue(ms < 2000, "first flush after " + ms + " ms");
        }
    }

    @Test
    void flush_sends_everything_pending_before_it_returns() {
        try (SondeClient c = builder().build()) {
            for (int i = 0; i < 100; i++) {
                c.histogram("h", i);
            }
            c.flush();
            assertEquals(100, capture.messages().size());
            c.flush();
            assertEquals(100, capture.messages().size(), "an empty flush sends nothing");
        }
    }

    @Test
    void close_flushes_stops_the_flusher_and_counts_later_emits_as_drops() throws Exception {
        SondeClient c = builder().build();
        c.meter("m", 5);
        Thread flusher = c.flusherThread();
        assertTrue(flusher.isAlive());
        c.close();
        assertEquals(List.of(msg("meter", "m", "5", "", "")), capture.messages());
        assertFalse(flusher.isAlive(), "flusher stopped");
        assertEquals(1, capture.closed.get(), "socket closed");
        c.counter("late", 1);
        c.timer("late", 1);
        assertEquals(2, c.dropped());
        c.flush();
        c.close();
        assertEquals(1, capture.messages().size(), "nothing sent after close");
        assertThrows(IllegalArgumentException.class, () -> c.counter("", 1), "validation still applies");
    }

    @Test
    void close_keeps_the_callers_interrupt_flag_and_still_flushes() {
        SondeClient c = builder().build();
        c.counter("x", 1);
        Thread.currentThread().interrupt();
        try {
            c.close();
            assertTrue(Thread.currentThread().isInterrupted());
        } finally {
            Thread.interrupted();
        }
        assertEquals(1, capture.messages().size());
    }

    @Test
    void send_errors_are_counted_never_thrown_and_the_transport_is_reopened() {
        try (SondeClient c = builder().build()) {
            c.counter("a", 1);
            c.flush();
            assertEquals(1, capture.opened.get());
            capture.failNext.set(2);
            c.counter("b", 1);
            c.flush();
            c.counter("c", 1);
            c.flush();
            assertEquals(2, c.sendErrors());
            assertEquals(2, capture.closed.get(), "each failed transport closed");
            assertEquals(2, capture.opened.get(), "and replaced at the next send");
            c.counter("d", 1);
            c.flush();
            assertEquals(3, capture.opened.get());
            c.counter("e", 1);
            c.flush();
            assertEquals(2, c.sendErrors());
            assertEquals(3, capture.opened.get(), "a working transport is kept");
        }
        List<String> names = new ArrayList<>();
        for (List<String> m : capture.messages()) {
            names.add(m.get(2));
        }
        assertEquals(List.of("a", "d", "e"), names);
    }

    @Test
    void a_transport_that_cannot_be_opened_counts_an_error_per_datagram() {
        Transport.Factory refusing = a -> {
            throw new java.net.ConnectException("refused");
        };
        try (SondeClient c = SondeClient.builder().address("udp://127.0.0.1:9").transportFactory(refusing)
                .flushInterval(NEVER).build()) {
            c.counter("a", 1);
            c.flush();
            c.counter("a", 1);
            c.flush();
            assertEquals(2, c.sendErrors());
        }
    }

    @Test
    void a_counter_sum_that_overflows_to_infinity_is_dropped_and_counted() {
        try (SondeClient c = builder().build()) {
            c.counter("big", Double.MAX_VALUE);
            c.counter("big", Double.MAX_VALUE);
            c.counter("ok", 1);
            c.flush();
            assertEquals(1, c.dropped());
        }
        assertEquals(List.of(msg("counter", "ok", "1", "", "")), capture.messages());
    }

    @Test
    void emits_from_many_threads_all_arrive_and_sum_correctly() throws Exception {
        int threads = 4;
        int each = 5000;
        try (SondeClient c = builder().bufferSize(threads * each).flushInterval(Duration.ofMillis(5)).build()) {
            List<Thread> ts = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Thread th = new Thread(() -> {
                    for (int i = 0; i < each; i++) {
                        c.counter("n", 1);
                    }
                });
                ts.add(th);
                th.start();
            }
            for (Thread th : ts) {
                th.join();
            }
            c.flush();
            assertEquals(0, c.dropped());
        }
        double total = 0;
        for (List<String> m : capture.messages()) {
            total += Double.parseDouble(m.get(3));
        }
        assertEquals(threads * each, total);
    }

    @Test
    void time_with_try_with_resources_emits_the_elapsed_milliseconds_once() {
        try (SondeClient c = builder().build()) {
            Timing t = c.time("block", Tag.of("k", "v"));
            try (t) {
                spin(15);
            }
            t.close();
            c.flush();
        }
        List<List<String>> m = capture.messages();
        assertEquals(1, m.size(), "closing twice emits once");
        assertEquals("timer", m.get(0).get(1));
        assertEquals("block", m.get(0).get(2));
        assertEquals("k=v", m.get(0).get(4));
        double ms = Double.parseDouble(m.get(0).get(3));
        assertTrue(ms >= 15 && ms < 10_000, "elapsed " + ms + " ms");
    }

    @Test
    void time_runs_a_runnable_or_supplier_and_times_it_even_when_it_throws() {
        try (SondeClient c = builder().build()) {
            c.time("run", () -> spin(5));
            assertEquals("result", c.time("get", () -> "result", Tag.of("a", "b")));
            // A method call fits Runnable and Supplier; Java picks Supplier, so the result comes back.
            String fromCall = c.time("call", () -> String.valueOf(42));
            assertEquals("42", fromCall);
            assertThrows(IllegalStateException.class, () -> c.time("fails", (Runnable) () -> {
                throw new IllegalStateException("boom");
            }));
            assertThrows(IllegalArgumentException.class, () -> c.time("bad name", (Runnable) () -> {
                throw new AssertionError("must not run when the name is invalid");
            }));
            c.flush();
        }
        List<List<String>> m = capture.messages();
        assertEquals(List.of("run", "get", "call", "fails"),
                List.of(m.get(0).get(2), m.get(1).get(2), m.get(2).get(2), m.get(3).get(2)));
        assertTrue(Double.parseDouble(m.get(0).get(3)) >= 5);
        assertEquals("a=b", m.get(1).get(4));
    }

    @Test
    void emitting_never_needs_the_socket() {
        // build() does no I/O: the transport is opened at the first send.
        try (SondeClient c = builder().build()) {
            c.counter("a", 1);
            assertEquals(0, capture.opened.get());
            c.flush();
            assertEquals(1, capture.opened.get());
        }
    }

    @Test
    void the_client_reports_where_it_sends() {
        try (SondeClient c = builder().build()) {
            assertEquals("udp://127.0.0.1:9", c.address());
        }
        SondeClient.Builder b = builder();
        assertSame(b, b.prefix("p"));
    }

    private static void spin(long ms) {
        long end = System.nanoTime() + ms * 1_000_000;
        while (System.nanoTime() < end) {
            Thread.onSpinWait();
        }
    }
}
