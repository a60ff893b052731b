package dev.sonde.client;

/**
 * Packs encoded messages into datagrams: one message alone, or several in
 * an array16 bunch that stays under 32 KiB (SPEC.md, "Message encoding").
 *
 * <p>The caller drives it: {@link #add} each message in order, then
 * {@link #finish} once; every completed datagram is pushed to the
 * {@link Sink} at once, so no more than one datagram is ever held.
 * Not thread-safe: the flusher owns one.
 */
final class Batcher {
    /** Largest datagram we send with more than one message: "under 32 KiB". */
    static final int MAX_DATAGRAM = 32 * 1024 - 1;

    /** array16 header: 0xdc and a big-endian u16 count. */
    private static final int HEADER = 3;

    /** Receives each finished datagram. The bytes are only valid during the call. */
    interface Sink {
        void send(byte[] data, int offset, int length);
    }

    // The header is written last, when the count is known; room is kept for it.
    private final byte[] datagram = new byte[MAX_DATAGRAM];
    private int pos = HEADER;
    private int count;

    /** Adds one encoded message, sending the current datagram first if the message does not fit. */
    void add(byte[] message, int offset, int length, Sink sink) {
        if (count > 0 && pos + length > MAX_DATAGRAM) {
            finish(sink);
        }
        if (HEADER + length > MAX_DATAGRAM) {
            // A single message too large for any bunch (names and tags of
            // tens of KiB). It goes out alone rather than being dropped here:
            // the agent reads datagrams up to 64 KiB, and if the transport
            // refuses it, that is counted as a send error.
            sink.send(message, offset, length);
            return;
        }
        System.arraycopy(message, offset, datagram, pos, length);
        pos += length;
        count++;
    }

    /** Sends what is pending: a bare message if there is one, a bunch if more. */
    void finish(Sink sink) {
        if (count == 0) {
            return;
        }
        if (count == 1) {
            sink.send(datagram, HEADER, pos - HEADER);
        } else {
            // count fits in u16: even the smallest message (~18 bytes) allows
            // fewer than 2,000 per 32 KiB.
            datagram[0] = (byte) 0xdc;
            datagram[1] = (byte) (count >>> 8);
            datagram[2] = (byte) count;
            sink.send(datagram, 0, pos);
        }
        pos = HEADER;
        count = 0;
    }
}
