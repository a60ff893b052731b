package dev.sonde.client;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * The bounded buffer between emitting threads and the flusher: a
 * lock-free multi-producer, single-consumer ring of preallocated slots.
 *
 * <p>Producers ({@link #offer}) never block, never take a lock and never
 * allocate: a producer claims a position with one CAS, writes the point's
 * fields into that position's slot, and publishes it. When every slot is
 * full, {@code offer} returns {@link #FULL} at once and the caller counts a
 * drop. The single consumer ({@link #drain}, called with the client's
 * flush lock held) reads published slots in order and frees them.
 *
 * <h2>Design</h2>
 * The algorithm is Dmitry Vyukov's bounded queue, with a sequence number
 * per slot. The sequence of the slot for position {@code p} is
 * {@code 2p} while the slot is free for {@code p}, {@code 2p + 1} once the
 * point at {@code p} is published, and {@code 2(p + capacity)} when the
 * consumer frees it for the next lap. Doubling (instead of Vyukov's
 * {@code p} / {@code p + 1}) keeps "published at p" and "free for p + 1"
 * distinct even when the capacity is 1. Positions are longs and never
 * wrap in practice (2^62 emits). The release/acquire pair on the sequence
 * orders the plain slot-field writes before the consumer's reads.
 */
final class PointBuffer {
    /** {@link #offer} results. */
    static final int FULL = 0;
    static final int ACCEPTED = 1;
    /** Accepted, and the buffer is now full: time to wake the flusher. */
    static final int ACCEPTED_NOW_FULL = 2;

    /** One point's fields, written by a producer and read by the consumer. */
    static final class Slot {
        MetricType type;
        String name;
        double value;
        Tag[] tags;
        long ts;
    }

    /** What the consumer does with each drained point; the slot is reused after the call. */
    interface Consumer {
        void accept(Slot slot);
    }

    private final int capacity;
    private final Slot[] slots;
    private final AtomicLongArray seq;
    private final AtomicLong tail = new AtomicLong();
    /** Next position to read; only the consumer touches it, under the flush lock. */
    private long head;

    PointBuffer(int capacity) {
        if (capacity < 1) {
            throw new IllegalArgumentException("buffer capacity must be at least 1, got " + capacity);
        }
        this.capacity = capacity;
        this.slots = new Slot[capacity];
        this.seq = new AtomicLongArray(capacity);
        for (int i = 0; i < capacity; i++) {
            slots[i] = new Slot();
            seq.set(i, 2L * i);
        }
    }

    int capacity() {
        return capacity;
    }

    /** Stores one point if there is room; never blocks. */
    int offer(MetricType type, String name, double value, Tag[] tags, long ts) {
        long pos = tail.get();
        int i;
        for (;;) {
            i = (int) (pos % capacity);
            long dif = seq.getAcquire(i) - 2 * pos;
            if (dif == 0) {
                if (tail.compareAndSet(pos, pos + 1)) {
                    break;
                }
                pos = tail.get();
            } else if (dif < 0) {
                // The slot still holds the point from the previous lap.
                return FULL;
            } else {
                // Another producer took this position; catch up.
                pos = tail.get();
            }
        }
        Slot s = slots[i];
        s.type = type;
        s.name = name;
        s.value = value;
        s.tags = tags;
        s.ts = ts;
        seq.setRelease(i, 2 * pos + 1);
        // Full if the slot for the next position is not yet freed.
        long next = pos + 1;
        return seq.getAcquire((int) (next % capacity)) - 2 * next < 0 ? ACCEPTED_NOW_FULL : ACCEPTED;
    }

    /**
     * Hands up to {@code max} published points to {@code consumer} in
     * order, freeing their slots. Stops early at a position whose producer
     * has claimed it but not yet published it. Only one thread at a time.
     *
     * @return the number of points drained
     */
    int drain(Consumer consumer, int max) {
        long pos = head;
        int n = 0;
        while (n < max) {
            int i = (int) (pos % capacity);
            if (seq.getAcquire(i) != 2 * pos + 1) {
                break;
            }
            Slot s = slots[i];
            try {
                consumer.accept(s);
            } finally {
                // Freed even if the consumer throws, or the ring would jam.
                s.name = null;
                s.tags = null;
                seq.setRelease(i, 2 * (pos + capacity));
                pos++;
                n++;
                head = pos;
            }
        }
        return n;
    }
}
