package dev.sonde.client;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * An in-memory transport factory for client tests: keeps every datagram,
 * and can make sends fail or block on demand.
 */
final class CapturingTransport implements Transport.Factory {
    private final List<byte[]> datagrams = new ArrayList<>();
    final AtomicInteger opened = new AtomicInteger();
    final AtomicInteger closed = new AtomicInteger();
    /** Sends throw while this is positive, counting down. */
    final AtomicInteger failNext = new AtomicInteger();
    /** If set, the first send waits on it, after counting down {@link #sendEntered}. */
    volatile CountDownLatch gate;
    final CountDownLatch sendEntered = new CountDownLatch(1);

    @Override
    public Transport open(Address address) {
        opened.incrementAndGet();
        return new Transport() {
            @Override
            public boolean send(byte[] data, int offset, int length) throws IOException {
                CountDownLatch g = gate;
                if (g != null) {
                    sendEntered.countDown();
                    try {
                        if (!g.await(30, TimeUnit.SECONDS)) {
                            throw new AssertionError("gate never opened");
                        }
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IOException(e);
                    }
                    gate = null;
                }
                if (failNext.getAndUpdate(n -> n > 0 ? n - 1 : 0) > 0) {
                    throw new IOException("injected failure");
                }
                synchronized (datagrams) {
                    datagrams.add(Arrays.copyOfRange(data, offset, offset + length));
                }
                return true;
            }

            @Override
            public void close() {
                closed.incrementAndGet();
            }
        };
    }

    List<byte[]> datagrams() {
        synchronized (datagrams) {
            return new ArrayList<>(datagrams);
        }
    }

    /** Every message of every datagram so far, in order, as six fields each. */
    List<List<String>> messages() {
        List<List<String>> out = new ArrayList<>();
        for (byte[] d : datagrams()) {
            out.addAll(Msgpack.decode(d));
        }
        return out;
    }
}
