package dev.sonde.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.net.DatagramPacket;
import java.net.DatagramSocket;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * junixsocket is an optional dependency: a process without it must still
 * send over UDP, and must reject unix addresses with a message that says
 * what to add. Run in a child JVM whose classpath is only the client's
 * classes and the test classes, since this JVM has junixsocket.
 */
class WithoutJunixsocketTest {

    /** The child's program: args are the UDP port and a unix socket path. */
    public static final class Child {
        public static void main(String[] args) {
            try {
                Class.forName("org.newsclub.net.unix.AFUNIXSocket");
                System.out.println("junixsocket unexpectedly present");
                return;
            } catch (ClassNotFoundException expected) {
                System.out.println("no junixsocket");
            }
            try (SondeClient c = SondeClient.builder().address("udp://127.0.0.1:" + args[0]).build()) {
                c.counter("child.hits", 1);
            }
            for (String scheme : List.of("unixgram://", "unixseq://")) {
                try {
                    SondeClient.builder().address(scheme + args[1]).build().close();
                    System.out.println(scheme + " accepted");
                } catch (IllegalArgumentException e) {
                    System.out.println(scheme + " rejected: " + e.getMessage());
                }
            }
        }
    }

    private static String classesOf(Class<?> c) throws Exception {
        return Path.of(c.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    }

    @Test
    void udp_works_and_unix_addresses_are_rejected_with_what_to_add() throws Exception {
        try (DatagramSocket rx = new DatagramSocket(0, InetAddress.getLoopbackAddress())) {
            rx.setSoTimeout(30_000);
            String cp = classesOf(SondeClient.class) + File.pathSeparator + classesOf(WithoutJunixsocketTest.class);
            Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-cp", cp, Child.class.getName(), Integer.toString(rx.getLocalPort()), "/tmp/none.sock")
                    .redirectErrorStream(true).start();
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "child JVM finished");
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertEquals(0, p.exitValue(), out);
            assertTrue(out.contains("no junixsocket"), out);
            for (String scheme : List.of("unixgram://", "unixseq://")) {
                assertTrue(out.contains(scheme + " rejected: cannot send to " + scheme + "/tmp/none.sock"), out);
            }
            assertTrue(out.contains("com.kohlschutter.junixsocket:junixsocket-core"), out);

            byte[] buf = new byte[65536];
            DatagramPacket packet = new DatagramPacket(buf, buf.length);
            rx.receive(packet);
            assertEquals(List.of(List.of("emit", "counter", "child.hits", "1", "", "")),
                    Msgpack.decode(Arrays.copyOf(buf, packet.getLength())));
        }
    }
}
