package dev.sonde.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The shared wire vectors ({@code testdata/vectors/msgpack/*.json}): for
 * every file whose {@code emits} is not null, encoding the emits must give
 * exactly {@code bytes_hex} (SPEC.md, "Message encoding").
 */
class WireVectorsTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** One vector with its emits. */
    private record Vector(String file, JsonNode emits, String hex) {}

    private static List<Vector> vectorsWithEmits() {
        Path dir = Repo.vectors().resolve("msgpack");
        try (Stream<Path> files = Files.list(dir)) {
            List<Vector> out = new ArrayList<>();
            for (Path f : files.filter(p -> p.toString().endsWith(".json")).sorted().collect(Collectors.toList())) {
                JsonNode v = JSON.readTree(f.toFile());
                JsonNode emits = v.get("emits");
                if (emits != null && !emits.isNull()) {
                    out.add(new Vector(f.getFileName().toString(), emits, v.get("bytes_hex").asText()));
                }
            }
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Test
    void the_vector_directory_has_vectors_with_emits() {
        // Guards the dynamic tests below against passing on an empty or moved directory.
        assertTrue(vectorsWithEmits().size() >= 5, "expected the msgpack vectors with emits");
    }

    @TestFactory
    Stream<DynamicTest> every_vector_with_emits_encodes_to_exactly_its_bytes() {
        List<Vector> vectors = vectorsWithEmits();
        assertFalse(vectors.isEmpty(), "no msgpack vectors with emits found");
        return vectors.stream().map(v -> DynamicTest.dynamicTest(v.file(), () -> {
            MsgpackWriter w = new MsgpackWriter(16);
            Batcher batcher = new Batcher();
            List<byte[]> datagrams = new ArrayList<>();
            Batcher.Sink sink = (d, off, len) -> datagrams.add(java.util.Arrays.copyOfRange(d, off, off + len));
            for (JsonNode e : v.emits()) {
                MetricType type = MetricType.fromWireName(e.get("type").asText());
                assertNotNull(type, "unknown type " + e.get("type"));
                w.reset();
                w.writeMessage(type.encoded, e.get("name").asText(), e.get("value").asText(),
                        e.get("tags").asText(), e.get("ts").asText());
                batcher.add(w.array(), 0, w.size(), sink);
            }
            batcher.finish(sink);
            assertEquals(1, datagrams.size(), "datagrams");
            assertEquals(v.hex(), Msgpack.hex(datagrams.get(0)));
        }));
    }

    /**
     * The same vectors through the public API, where the API can express
     * them: the name, tags and value text must be what the client would
     * produce from them (vector 0005's {@code -3e2} or 0007's space-separated
     * tags cannot be, by design). This checks the whole client path, flush
     * included, against the shared bytes.
     */
    @TestFactory
    Stream<DynamicTest> the_client_sends_the_vector_bytes_for_every_vector_it_can_express() {
        List<Vector> expressible = vectorsWithEmits().stream().filter(WireVectorsTest::expressible)
                .collect(Collectors.toList());
        assertTrue(expressible.size() >= 5, "too few vectors expressible through the API: " + expressible);
        return expressible.stream().map(v -> DynamicTest.dynamicTest(v.file(), () -> {
            CapturingTransport capture = new CapturingTransport();
            try (SondeClient c = SondeClient.builder().address("udp://127.0.0.1:9").transportFactory(capture)
                    .flushInterval(Duration.ofHours(1)).build()) {
                for (JsonNode e : v.emits()) {
                    emit(c, e);
                }
                c.flush();
            }
            List<byte[]> d = capture.datagrams();
            assertEquals(1, d.size(), "datagrams");
            assertEquals(v.hex(), Msgpack.hex(d.get(0)));
        }));
    }

    private static boolean expressible(Vector v) {
        for (JsonNode e : v.emits()) {
            try {
                Validation.checkName(e.get("name").asText());
                tags(e.get("tags").asText());
                String value = e.get("value").asText();
                if (!ValueText.format(Double.parseDouble(value)).equals(value)) {
                    return false;
                }
            } catch (IllegalArgumentException ex) {
                return false;
            }
        }
        return true;
    }

    private static Tag[] tags(String text) {
        if (text.isEmpty()) {
            return new Tag[0];
        }
        String[] pairs = text.split("\\|", -1);
        Tag[] out = new Tag[pairs.length];
        for (int i = 0; i < pairs.length; i++) {
            int eq = pairs[i].indexOf('=');
            if (eq < 0) {
                throw new IllegalArgumentException("not k=v: " + pairs[i]);
            }
            out[i] = Tag.of(pairs[i].substring(0, eq), pairs[i].substring(eq + 1));
        }
        return out;
    }

    private static void emit(SondeClient c, JsonNode e) {
        String name = e.get("name").asText();
        double value = Double.parseDouble(e.get("value").asText());
        Tag[] tags = tags(e.get("tags").asText());
        switch (e.get("type").asText()) {
            case "counter" -> c.counter(name, value, tags);
            case "rate_counter" -> c.rateCounter(name, value, tags);
            case "meter" -> c.meter(name, value, tags);
            case "timer" -> c.timer(name, value, tags);
            case "store" -> c.store(name, value, tags);
            case "ts_store" -> c.tsStore(name, value, Long.parseLong(e.get("ts").asText()), tags);
            case "histogram" -> c.histogram(name, value, tags);
            default -> throw new AssertionError(e.get("type"));
        }
    }
}
