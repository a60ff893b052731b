package dev.sonde.client;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.nio.ByteBuffer;
import java.nio.channels.DatagramChannel;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.util.concurrent.TimeUnit;

/**
 * A {@link Transport} over a connected, non-blocking {@link DatagramChannel}:
 * the JDK's for UDP, junixsocket's for unixgram and unixseq.
 *
 * <h2>Design</h2>
 * The channel is non-blocking so a stuck agent can never hold the flusher
 * (and with it {@code flush()} and {@code close()}) forever. But a unix
 * datagram peer queues only {@code net.unix.max_dgram_qlen} datagrams (10
 * by default on Linux), so a burst of bunches would be refused at once by a
 * perfectly healthy agent that simply has not read yet. So when a write
 * finds no room, we wait on a selector for the socket to become writable,
 * up to {@link #WAIT_NANOS} per datagram, before giving up on that
 * datagram: a bounded stall on the flusher thread, never on an emitting
 * thread.
 */
final class ChannelTransport implements Transport {
    /** How long one datagram may wait for room at the receiver. */
    static final long WAIT_NANOS = TimeUnit.MILLISECONDS.toNanos(100);

    private final DatagramChannel channel;
    private Selector selector;

    ChannelTransport(DatagramChannel channel) throws IOException {
        this.channel = channel;
        channel.configureBlocking(false);
    }

    /** Opens a transport to an address: UDP here, unix sockets through junixsocket. */
    static Transport open(Address address) throws IOException {
        switch (address.kind()) {
            case UDP:
                return udp(address);
            case UNIXGRAM:
            case UNIXSEQ:
                return UnixChannels.open(address);
            default:
                throw new AssertionError(address.kind());
        }
    }

    private static Transport udp(Address address) throws IOException {
        // Resolved on every (re)connect, so a changed DNS entry is followed.
        InetSocketAddress target = new InetSocketAddress(address.host(), address.port());
        if (target.isUnresolved()) {
            throw new UnknownHostException(address.host());
        }
        DatagramChannel ch = DatagramChannel.open();
        try {
            // Connected, so an ICMP "port unreachable" from a stopped agent
            // surfaces as an error on a later write and triggers a reconnect.
            ch.connect(target);
            return new ChannelTransport(ch);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    @Override
    public boolean send(byte[] data, int offset, int length) throws IOException {
        ByteBuffer buf = ByteBuffer.wrap(data, offset, length);
        if (channel.write(buf) > 0) {
            return true;
        }
        if (selector == null) {
            // The channel's own provider: junixsocket channels need junixsocket's selector.
            selector = channel.provider().openSelector();
            channel.register(selector, SelectionKey.OP_WRITE);
        }
        long deadline = System.nanoTime() + WAIT_NANOS;
        for (;;) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                return false;
            }
            selector.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
            selector.selectedKeys().clear();
            if (channel.write(buf) > 0) {
                return true;
            }
        }
    }

    @Override
    public void close() throws IOException {
        try {
            if (selector != null) {
                selector.close();
            }
        } finally {
            channel.close();
        }
    }
}
