package dev.sonde.client;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** SPEC.md "Validation": every bad name, prefix, tag and value is an exception, never a silent drop. */
class ValidationTest {
    private CapturingTransport capture;
    private SondeClient client;

    @BeforeEach
    void start() {
        capture = new CapturingTransport();
        client = SondeClient.builder().address("udp://127.0.0.1:9").transportFactory(capture)
                .flushInterval(Duration.ofHours(1)).build();
    }

    @AfterEach
    void stop() {
        client.close();
    }

    @ParameterizedTest
    @ValueSource(strings = {"a|b", "a=b", "a b", "a\nb", "a\rb", "|", " lead", "trail "})
    void a_name_with_a_forbidden_character_is_rejected_by_every_emit(String name) {
        assertThrows(IllegalArgumentException.class, () -> client.counter(name, 1));
        assertThrows(IllegalArgumentException.class, () -> client.rateCounter(name, 1));
        assertThrows(IllegalArgumentException.class, () -> client.meter(name, 1));
        assertThrows(IllegalArgumentException.class, () -> client.timer(name, 1));
        assertThrows(IllegalArgumentException.class, () -> client.store(name, 1));
        assertThrows(IllegalArgumentException.class, () -> client.tsStore(name, 1, 1_763_800_200L));
        assertThrows(IllegalArgumentException.class, () -> client.histogram(name, 1));
        assertThrows(IllegalArgumentException.class, () -> client.time(name));
        assertThrows(IllegalArgumentException.class, () -> client.counter(name, 1, Map.of("k", "v")));
        client.flush();
        assertEquals(0, capture.datagrams().size(), "nothing invalid is sent");
        assertEquals(0, client.dropped(), "and nothing is counted as a drop either");
    }

    @Test
    void the_error_names_the_offending_text_and_character() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> client.counter("web requests", 1));
        assertTrue(e.getMessage().contains("\"web requests\""), e.getMessage());
        assertTrue(e.getMessage().contains("a space at index 3"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Tag.of("host", "a=b"));
        assertTrue(e.getMessage().contains("'='"), e.getMessage());
        assertTrue(e.getMessage().contains("\"host\""), e.getMessage());
    }

    @Test
    void an_empty_name_is_rejected() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> client.store("", 1));
        assertEquals("metric name is empty", e.getMessage());
    }

    @Test
    void dots_dashes_colons_and_unicode_are_fine_in_names_and_tags() {
        assertDoesNotThrow(() -> client.counter("web.api-v2:hits_total", 1, Tag.of("région", "île-de-france")));
    }

    @ParameterizedTest
    @ValueSource(strings = {"a|b", "a=b", "a b", "a\nb", "a\rb"})
    void a_tag_key_or_value_with_a_forbidden_character_is_rejected(String bad) {
        assertThrows(IllegalArgumentException.class, () -> Tag.of(bad, "v"));
        assertThrows(IllegalArgumentException.class, () -> Tag.of("k", bad));
        assertThrows(IllegalArgumentException.class, () -> client.counter("c", 1, Map.of(bad, "v")));
        assertThrows(IllegalArgumentException.class, () -> client.counter("c", 1, Map.of("k", bad)));
    }

    @Test
    void an_empty_tag_key_is_rejected_but_an_empty_value_is_allowed() {
        assertThrows(IllegalArgumentException.class, () -> Tag.of("", "v"));
        assertDoesNotThrow(() -> Tag.of("k", ""));
    }

    @ParameterizedTest
    @ValueSource(strings = {"a|b", "a=b", "a b", "a\nb", "a\rb"})
    void a_prefix_with_a_forbidden_character_is_rejected(String prefix) {
        assertThrows(IllegalArgumentException.class, () -> SondeClient.builder().prefix(prefix));
    }

    @ParameterizedTest
    @ValueSource(doubles = {Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY})
    void a_value_that_is_not_finite_is_rejected(double v) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> client.timer("t", v));
        assertTrue(e.getMessage().contains("finite"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> client.counter("c", v));
        assertThrows(IllegalArgumentException.class, () -> client.tsStore("s", v, 1));
    }

    @Test
    void a_null_tag_is_reported_at_the_call_not_on_the_flusher() {
        assertThrows(NullPointerException.class, () -> client.counter("c", 1, Tag.of("a", "b"), null));
        Map<String, String> withNull = new LinkedHashMap<>();
        withNull.put("k", null);
        assertThrows(NullPointerException.class, () -> client.counter("c", 1, withNull));
    }

    @Test
    void builder_settings_out_of_range_are_rejected() {
        assertThrows(IllegalArgumentException.class, () -> SondeClient.builder().bufferSize(0));
        assertThrows(IllegalArgumentException.class, () -> SondeClient.builder().flushInterval(Duration.ZERO));
        assertThrows(IllegalArgumentException.class,
                () -> SondeClient.builder().flushInterval(Duration.ofMillis(-1)));
        assertThrows(IllegalArgumentException.class, () -> SondeClient.builder().address("tcp://127.0.0.1:1"));
    }
}
