package dev.sonde.client;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.function.Predicate;

/**
 * Where the client sends, parsed from an address string (SPEC.md,
 * "Transports and addresses"): {@code udp://HOST:PORT},
 * {@code unixgram:///absolute/path} or {@code unixseq:///absolute/path}.
 *
 * @param kind the transport
 * @param host the UDP host (name or address, IPv6 without brackets), or null
 * @param port the UDP port, or 0
 * @param path the unix socket path, or null
 */
record Address(Kind kind, String host, int port, Path path) {

    enum Kind {
        UDP("udp"),
        UNIXGRAM("unixgram"),
        UNIXSEQ("unixseq");

        final String scheme;

        Kind(String scheme) {
            this.scheme = scheme;
        }
    }

    /** The unix datagram socket used by default when its file exists. */
    static final String DEFAULT_UNIX = "unixgram:///tmp/metric.sock";
    /** The default otherwise. */
    static final String DEFAULT_UDP = "udp://127.0.0.1:9123";
    /** The environment variable that overrides the default address. */
    static final String ENV = "SONDE_ADDRESS";

    boolean isUnix() {
        return kind != Kind.UDP;
    }

    /**
     * Parses an address string.
     *
     * @throws IllegalArgumentException naming the problem and the accepted forms
     */
    static Address parse(String text) {
        if (text == null) {
            throw new NullPointerException("address is null");
        }
        int sep = text.indexOf("://");
        if (sep < 0) {
            throw new IllegalArgumentException(
                    "address " + Validation.quote(text) + " has no scheme; expected "
                            + "udp://HOST:PORT, unixgram:///path or unixseq:///path");
        }
        String scheme = text.substring(0, sep);
        String rest = text.substring(sep + 3);
        switch (scheme) {
            case "udp":
                return parseUdp(text, rest);
            case "unixgram":
                return new Address(Kind.UNIXGRAM, null, 0, unixPath(text, rest));
            case "unixseq":
                return new Address(Kind.UNIXSEQ, null, 0, unixPath(text, rest));
            default:
                throw new IllegalArgumentException(
                        "address " + Validation.quote(text) + " has unknown scheme "
                                + Validation.quote(scheme)
                                + "; expected udp://, unixgram:// or unixseq://");
        }
    }

    private static Address parseUdp(String text, String rest) {
        String host;
        String port;
        if (rest.startsWith("[")) {
            int close = rest.indexOf(']');
            if (close < 0 || close + 1 >= rest.length() || rest.charAt(close + 1) != ':') {
                throw notHostPort(text);
            }
            host = rest.substring(1, close);
            port = rest.substring(close + 2);
        } else {
            int colon = rest.lastIndexOf(':');
            if (colon < 0 || rest.indexOf(':') != colon) {
                // No port, or an IPv6 address without brackets.
                throw notHostPort(text);
            }
            host = rest.substring(0, colon);
            port = rest.substring(colon + 1);
        }
        if (host.isEmpty()) {
            throw notHostPort(text);
        }
        int p;
        try {
            p = Integer.parseInt(port);
        } catch (NumberFormatException e) {
            throw notHostPort(text);
        }
        if (p < 1 || p > 65535) {
            throw new IllegalArgumentException(
                    "address " + Validation.quote(text) + " has port " + p + "; expected 1 to 65535");
        }
        return new Address(Kind.UDP, host, p, null);
    }

    private static IllegalArgumentException notHostPort(String text) {
        return new IllegalArgumentException(
                "address " + Validation.quote(text)
                        + " is not udp://HOST:PORT (IPv6 hosts in brackets: udp://[::1]:9123)");
    }

    private static Path unixPath(String text, String rest) {
        // Absolute only, as the agent requires for its listen addresses: a
        // relative path would depend on each process's working directory.
        if (!rest.startsWith("/") || rest.length() < 2) {
            throw new IllegalArgumentException(
                    "address " + Validation.quote(text)
                            + " needs an absolute path, like unixgram:///tmp/metric.sock");
        }
        return Path.of(rest);
    }

    /**
     * The address to use, by SPEC.md's rule: an explicit address first;
     * else {@code SONDE_ADDRESS} when set and non-empty; else
     * {@code unixgram:///tmp/metric.sock} if that file exists and unix
     * datagram sockets are available in this build; else
     * {@code udp://127.0.0.1:9123}.
     *
     * @param explicit the address given to the builder, or null
     * @param env the value of {@code SONDE_ADDRESS}, or null
     * @param exists whether a file exists (injected so the rule can be tested)
     * @param unixAvailable whether unix sockets can be used (see {@link UnixSupport})
     */
    static Address resolve(String explicit, String env, Predicate<Path> exists, boolean unixAvailable) {
        if (explicit != null) {
            return parse(explicit);
        }
        if (env != null && !env.isEmpty()) {
            return parse(env);
        }
        Address unix = parse(DEFAULT_UNIX);
        if (unixAvailable && exists.test(unix.path())) {
            return unix;
        }
        return parse(DEFAULT_UDP);
    }

    /** {@link #resolve(String, String, Predicate, boolean)} with the real environment and file system. */
    static Address resolve(String explicit) {
        String env = System.getenv(ENV);
        if (explicit != null || (env != null && !env.isEmpty())) {
            return resolve(explicit, env, Files::exists, false);
        }
        // Only probe for junixsocket when the default socket file is there.
        Address unix = parse(DEFAULT_UNIX);
        boolean socketFile = Files.exists(unix.path());
        boolean unixAvailable = socketFile && UnixSupport.available();
        if (socketFile && !unixAvailable) {
            System.getLogger(SondeClient.class.getName()).log(System.Logger.Level.INFO,
                    "sonde: " + unix.path() + " exists but is not used: " + UnixSupport.problem()
                            + "; sending to " + DEFAULT_UDP + " instead");
        }
        return resolve(null, null, Files::exists, unixAvailable);
    }

    @Override
    public String toString() {
        if (kind == Kind.UDP) {
            return kind.scheme + "://" + (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + port;
        }
        return kind.scheme + "://" + path;
    }
}
