package dev.sonde.client;

import java.io.IOException;
import org.newsclub.net.unix.AFSocket;
import org.newsclub.net.unix.AFSocketCapability;
import org.newsclub.net.unix.AFSocketType;
import org.newsclub.net.unix.AFUNIXDatagramChannel;
import org.newsclub.net.unix.AFUNIXSelectorProvider;
import org.newsclub.net.unix.AFUNIXSocketAddress;

/**
 * Unix datagram and seqpacket channels, through junixsocket.
 *
 * <p>The only class that names junixsocket types. It is loaded only after
 * {@link UnixSupport} has found junixsocket on the classpath, so the
 * client works without that optional dependency for as long as no unix
 * address is used.
 */
final class UnixChannels {
    private UnixChannels() {}

    /** Whether junixsocket's native library loaded and supports AF_UNIX datagrams here. */
    static boolean nativeSupport() {
        return AFSocket.supports(AFSocketCapability.CAPABILITY_UNIX_DATAGRAMS);
    }

    static Transport open(Address address) throws IOException {
        // junixsocket speaks SOCK_SEQPACKET through its datagram channel:
        // connect once, then every write is one packet.
        AFSocketType type = address.kind() == Address.Kind.UNIXSEQ
                ? AFSocketType.SOCK_SEQPACKET
                : AFSocketType.SOCK_DGRAM;
        AFUNIXDatagramChannel ch = AFUNIXSelectorProvider.provider().openDatagramChannel(type);
        try {
            ch.connect(AFUNIXSocketAddress.of(address.path()));
            return new ChannelTransport(ch);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }
}
