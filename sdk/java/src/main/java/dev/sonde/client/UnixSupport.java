package dev.sonde.client;

/**
 * Whether unix datagram and seqpacket sockets can be used in this process.
 *
 * <p>Java 17 has no AF_UNIX datagram or seqpacket sockets:
 * {@code UnixDomainSocketAddress} (JEP 380) works only with stream
 * channels. They come from the optional dependency
 * {@code com.kohlschutter.junixsocket:junixsocket-core}, which must be on
 * the classpath and whose native library must load on this platform.
 */
final class UnixSupport {
    private UnixSupport() {}

    /** Probed once, on first use: class loading and the native library load are not free. */
    private static final class Probe {
        static final String PROBLEM = probe();
    }

    /** True if unix sockets work here. */
    static boolean available() {
        return Probe.PROBLEM == null;
    }

    /** Why unix sockets do not work here, or null when they do. */
    static String problem() {
        return Probe.PROBLEM;
    }

    private static String probe() {
        try {
            Class.forName("org.newsclub.net.unix.AFUNIXDatagramChannel", false,
                    UnixSupport.class.getClassLoader());
        } catch (ClassNotFoundException | LinkageError e) {
            return "Java 17 has no unix datagram or seqpacket sockets of its own, and the optional "
                    + "dependency com.kohlschutter.junixsocket:junixsocket-core that provides them "
                    + "is not on the classpath; add it, or use a udp:// address";
        }
        try {
            if (!UnixChannels.nativeSupport()) {
                return "junixsocket is on the classpath but reports no AF_UNIX datagram support "
                        + "on this platform; use a udp:// address";
            }
        } catch (LinkageError | RuntimeException e) {
            return "junixsocket is on the classpath but its native library did not load (" + e
                    + "); use a udp:// address";
        }
        return null;
    }
}
