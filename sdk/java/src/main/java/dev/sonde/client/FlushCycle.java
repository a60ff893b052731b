package dev.sonde.client;

import java.io.IOException;
import java.lang.System.Logger.Level;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One flush: drain the buffer, encode, pack and send.
 *
 * <p>All state here belongs to whichever thread holds the client's flush
 * lock (the flusher thread, or a caller of {@code flush()} or
 * {@code close()}), so nothing in it is synchronized. Per-point work that
 * could have been done when emitting (rendering tags, joining the prefix,
 * formatting the value) is done here instead, off the caller's thread.
 */
final class FlushCycle implements PointBuffer.Consumer, Batcher.Sink {
    private static final System.Logger LOG = System.getLogger(SondeClient.class.getName());

    /** The full names already joined with the prefix; cleared when it grows past this. */
    private static final int NAME_CACHE_LIMIT = 10_000;

    /** One message to send. */
    private static final class Entry {
        MetricType type;
        String name;
        String tags;
        double value;
        long ts;
    }

    private final String prefix;
    private final PointBuffer buffer;
    private final Address address;
    private final Transport.Factory factory;
    private final AtomicLong dropped;
    private final AtomicLong sendErrors;

    // Reused across flushes: entries is a pool, [0, count) in use.
    private final ArrayList<Entry> entries = new ArrayList<>();
    private int count;
    private final HashMap<String, String> fullNames = new HashMap<>();
    private final StringBuilder tagText = new StringBuilder(128);
    private final MsgpackWriter writer = new MsgpackWriter();
    private final Batcher batcher = new Batcher();

    private Transport transport;
    private boolean failing;

    FlushCycle(String prefix, PointBuffer buffer, Address address, Transport.Factory factory,
            AtomicLong dropped, AtomicLong sendErrors) {
        this.prefix = prefix;
        this.buffer = buffer;
        this.address = address;
        this.factory = factory;
        this.dropped = dropped;
        this.sendErrors = sendErrors;
    }

    /**
     * Drains and sends what is in the buffer: what was pending when the
     * drain began, so a flush under a constant stream of emits still ends.
     *
     * @return the number of points drained
     */
    int run() {
        int total = buffer.drain(this);
        if (count > 0) {
            sendEntries();
        }
        return total;
    }

    /** Takes one drained point (PointBuffer.Consumer); its series is already merged. */
    @Override
    public void accept(PointBuffer.Slot s) {
        next(s, render(s.tags));
    }

    private void next(PointBuffer.Slot s, String tags) {
        Entry e;
        if (count < entries.size()) {
            e = entries.get(count);
        } else {
            e = new Entry();
            entries.add(e);
        }
        count++;
        e.type = s.type;
        e.name = s.name;
        e.tags = tags;
        e.value = s.value;
        e.ts = s.ts;
    }

    /** {@code k=v} pairs joined with {@code |}, in the caller's order. */
    private String render(Tag[] tags) {
        if (tags.length == 0) {
            return "";
        }
        if (tags.length == 1) {
            return tags[0].key() + "=" + tags[0].value();
        }
        StringBuilder sb = tagText;
        sb.setLength(0);
        for (int i = 0; i < tags.length; i++) {
            if (i > 0) {
                sb.append('|');
            }
            sb.append(tags[i].key()).append('=').append(tags[i].value());
        }
        return sb.toString();
    }

    private String fullName(String name) {
        if (prefix.isEmpty()) {
            return name;
        }
        String full = fullNames.get(name);
        if (full == null) {
            if (fullNames.size() >= NAME_CACHE_LIMIT) {
                fullNames.clear();
            }
            full = prefix + "." + name;
            fullNames.put(name, full);
        }
        return full;
    }

    private void sendEntries() {
        try {
            for (int i = 0; i < count; i++) {
                Entry e = entries.get(i);
                if (!Double.isFinite(e.value)) {
                    // Only a sum can get here (each emit was checked): finite
                    // counters that overflowed to infinity when added up.
                    dropped.incrementAndGet();
                    continue;
                }
                writer.reset();
                writer.writeMessage(e.type.encoded, fullName(e.name), ValueText.format(e.value), e.tags,
                        e.type == MetricType.TS_STORE ? Long.toString(e.ts) : "");
                batcher.add(writer.array(), 0, writer.size(), this);
            }
            batcher.finish(this);
        } finally {
            for (int i = 0; i < count; i++) {
                Entry e = entries.get(i);
                e.name = null;
                e.tags = null;
            }
            count = 0;
        }
    }

    /** Sends one datagram (Batcher.Sink), opening the transport first if needed. */
    @Override
    public void send(byte[] data, int offset, int length) {
        try {
            if (transport == null) {
                transport = factory.open(address);
            }
            if (transport.send(data, offset, length)) {
                failing = false;
            } else {
                fail(new IOException("the receiver at " + address + " had no room for "
                        + length + " bytes within " + ChannelTransport.WAIT_NANOS / 1_000_000 + " ms"), false);
            }
        } catch (IOException | RuntimeException e) {
            // Reconnect on the next send: a restarted agent has a new socket.
            fail(e, true);
        }
    }

    private void fail(Exception e, boolean reconnect) {
        sendErrors.incrementAndGet();
        if (!failing) {
            // Logged once per run of failures, not per datagram.
            failing = true;
            LOG.log(Level.DEBUG, "sonde: sending to " + address + " failed; counting send errors", e);
        }
        if (reconnect) {
            closeTransport();
        }
    }

    void closeTransport() {
        if (transport != null) {
            try {
                transport.close();
            } catch (IOException | RuntimeException ignored) {
                // Already broken or closing; nothing more to do with it.
            }
            transport = null;
        }
    }
}
