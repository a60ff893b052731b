package dev.sonde.client;

import java.io.Closeable;
import java.io.IOException;

/**
 * A connected datagram socket that the flusher sends through.
 *
 * <p>The flusher drives it: {@link #send} one datagram at a time, from one
 * thread. After {@code send} throws, the flusher closes the transport and
 * opens a new one for the next datagram, so a restarted agent is found
 * again (SPEC.md, "Client behaviour").
 */
interface Transport extends Closeable {
    /**
     * Sends one datagram.
     *
     * @return true if it was sent; false if the receiver had no room for it
     *     within the transport's short wait (counted as a send error, the
     *     connection is kept)
     * @throws IOException if the socket failed (for example the agent is
     *     gone); the caller then replaces the transport
     */
    boolean send(byte[] data, int offset, int length) throws IOException;

    /** Opens a transport to an address. Called on the flusher thread. */
    interface Factory {
        Transport open(Address address) throws IOException;
    }
}
