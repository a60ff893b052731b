package dev.sonde.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.function.Predicate;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Address strings and the default-address rule of SPEC.md ("Transports and addresses"). */
class AddressTest {
    private static final Predicate<Path> SOCKET_EXISTS = p -> p.equals(Path.of("/tmp/metric.sock"));
    private static final Predicate<Path> NOTHING_EXISTS = p -> false;

    @Test
    void udp_addresses_parse_into_host_and_port() {
        Address a = Address.parse("udp://127.0.0.1:9123");
        assertEquals(Address.Kind.UDP, a.kind());
        assertEquals("127.0.0.1", a.host());
        assertEquals(9123, a.port());
        assertEquals("localhost", Address.parse("udp://localhost:1").host());
        Address v6 = Address.parse("udp://[::1]:9123");
        assertEquals("::1", v6.host());
        assertEquals("udp://[::1]:9123", v6.toString());
    }

    @Test
    void unix_addresses_parse_into_absolute_paths() {
        Address g = Address.parse("unixgram:///tmp/metric.sock");
        assertEquals(Address.Kind.UNIXGRAM, g.kind());
        assertEquals(Path.of("/tmp/metric.sock"), g.path());
        assertEquals("unixgram:///tmp/metric.sock", g.toString());
        Address s = Address.parse("unixseq:///run/sonde/seq.sock");
        assertEquals(Address.Kind.UNIXSEQ, s.kind());
        assertEquals(Path.of("/run/sonde/seq.sock"), s.path());
    }

    @ParameterizedTest
    @ValueSource(strings = {
        "127.0.0.1:9123", "tcp://127.0.0.1:9123", "udp://127.0.0.1", "udp://:9123", "udp://host:0",
        "udp://host:65536", "udp://host:port", "udp://::1:9123", "udp://[::1]9123", "unixgram://relative.sock",
        "unixgram://", "unixseq:///", ""
    })
    void malformed_addresses_are_rejected_with_the_accepted_forms(String text) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Address.parse(text));
        assertTrue(e.getMessage().contains(text.isEmpty() ? "\"\"" : text), e.getMessage());
    }

    @Test
    void an_explicit_address_wins_over_the_environment_and_the_default() {
        assertEquals("udp://10.0.0.1:1", Address.resolve("udp://10.0.0.1:1", "udp://127.0.0.1:2",
                SOCKET_EXISTS, true).toString());
    }

    @Test
    void sonde_address_overrides_the_default() {
        assertEquals("unixseq:///x/y.sock",
                Address.resolve(null, "unixseq:///x/y.sock", SOCKET_EXISTS, true).toString());
    }

    @Test
    void an_empty_sonde_address_counts_as_unset() {
        assertEquals(Address.DEFAULT_UDP, Address.resolve(null, "", NOTHING_EXISTS, true).toString());
    }

    @Test
    void the_default_is_the_unix_socket_when_its_file_exists() {
        assertEquals(Address.DEFAULT_UNIX, Address.resolve(null, null, SOCKET_EXISTS, true).toString());
    }

    @Test
    void the_default_is_udp_when_the_socket_file_does_not_exist() {
        assertEquals(Address.DEFAULT_UDP, Address.resolve(null, null, NOTHING_EXISTS, true).toString());
    }

    @Test
    void the_default_falls_back_to_udp_when_unix_sockets_are_unavailable_in_this_build() {
        assertEquals(Address.DEFAULT_UDP, Address.resolve(null, null, SOCKET_EXISTS, false).toString());
    }

    @Test
    void junixsocket_is_on_the_test_classpath_so_unix_sockets_are_available() {
        // If this fails, the unix transport tests would be silently weaker.
        assertEquals(null, UnixSupport.problem());
    }
}
