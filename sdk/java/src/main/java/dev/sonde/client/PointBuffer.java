package dev.sonde.client;

import java.util.Arrays;
import java.util.HashMap;

/**
 * The bounded buffer between emitting threads and the flusher: at most
 * {@code capacity} pending entries, in emit order, where a {@code counter}
 * or {@code rate_counter} for a series already pending is added into its
 * entry and a {@code store} replaces its entry's value.
 *
 * <p>Producers ({@link #offer}) never block on I/O and never wait for the
 * flusher: under a lock held for a map probe and a few field writes, an
 * emit either merges into its series' entry, fills a free entry, or (when
 * every entry is taken) returns {@link #FULL} and the caller counts a drop.
 * A hot loop over fewer series than the capacity therefore never fills the
 * buffer, however many points it emits (SPEC.md, Client behaviour). The
 * single consumer ({@link #drain}, called with the client's flush lock
 * held) swaps the full entry array for the spare one under the lock, then
 * reads the taken entries without it, so emits carry on meanwhile.
 *
 * <h2>Design</h2>
 * Entries are preallocated {@link Slot}s reused from flush to flush, and
 * the series map is probed with one reused key, so an emit into a series
 * already pending allocates nothing; the first emit of a series in a flush
 * adds one map node. A series is its type, name and tags compared element
 * by element, which is the same as comparing the rendered tag text because
 * tag keys and values cannot contain {@code |} or {@code =}. The lock is
 * a monitor, uncontended in the common case. A lock-free ring (one CAS per
 * emit) cannot find a pending series, so it must buffer every increment
 * and a hot loop fills it; the map probe costs a counter emit about 15 ns,
 * and an unmerged emit (a timer) costs no more under the monitor than it
 * did with the CAS (docs/benchmarks/LOG.md, "SDK emit cost").
 */
final class PointBuffer {
    /** {@link #offer} results. */
    static final int FULL = 0;
    static final int ACCEPTED = 1;
    /** Accepted, and the buffer is now full: time to wake the flusher. */
    static final int ACCEPTED_NOW_FULL = 2;

    /**
     * One pending entry, written by producers under the lock and read by
     * the consumer after the swap. It is also its own key in the series
     * map: equality and hash cover the type, name and tags.
     */
    static final class Slot {
        MetricType type;
        String name;
        double value;
        Tag[] tags;
        long ts;
        private int hash;

        /** Sets the series fields and the hash that the map uses. */
        void series(MetricType type, String name, Tag[] tags) {
            this.type = type;
            this.name = name;
            this.tags = tags;
            this.hash = 31 * (31 * type.ordinal() + name.hashCode()) + Arrays.hashCode(tags);
        }

        @Override
        public int hashCode() {
            return hash;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Slot s && s.type == type && s.name.equals(name) && Arrays.equals(s.tags, tags);
        }
    }

    /** What the consumer does with each drained point; the slot is reused after the call. */
    interface Consumer {
        void accept(Slot slot);
    }

    private final int capacity;
    /** Guarded by {@code this}: the entries emits go into, and how many are taken. */
    private Slot[] active;
    private int count;
    /** Guarded by {@code this}: the merged series of {@code active}. */
    private final HashMap<Slot, Slot> series = new HashMap<>();
    /** Guarded by {@code this}: the probe for {@link #series}, so a lookup allocates nothing. */
    private final Slot probe = new Slot();
    /** Only the consumer touches it, under the flush lock: the entries it drains. */
    private Slot[] spare;

    PointBuffer(int capacity) {
        if (capacity < 1) {
            throw new IllegalArgumentException("buffer capacity must be at least 1, got " + capacity);
        }
        this.capacity = capacity;
        this.active = new Slot[capacity];
        this.spare = new Slot[capacity];
    }

    int capacity() {
        return capacity;
    }

    /** Merges or stores one point if there is room; never waits for the flusher. */
    synchronized int offer(MetricType type, String name, double value, Tag[] tags, long ts) {
        if (type.merge != MetricType.Merge.NONE) {
            probe.series(type, name, tags);
            Slot s = series.get(probe);
            probe.name = null;
            probe.tags = null;
            if (s != null) {
                // A sum that overflows to infinity stays pending and is
                // dropped and counted when sent (FlushCycle).
                s.value = type.merge == MetricType.Merge.ADD ? s.value + value : value;
                return ACCEPTED;
            }
        }
        if (count == capacity) {
            return FULL;
        }
        Slot s = active[count];
        if (s == null) {
            s = new Slot();
            active[count] = s;
        }
        count++;
        s.series(type, name, tags);
        s.value = value;
        s.ts = ts;
        if (type.merge != MetricType.Merge.NONE) {
            series.put(s, s);
        }
        return count == capacity ? ACCEPTED_NOW_FULL : ACCEPTED;
    }

    /** Takes the pending entries, leaving an empty buffer for emits. */
    private synchronized int swap() {
        int n = count;
        if (n > 0) {
            Slot[] taken = active;
            active = spare;
            spare = taken;
            count = 0;
            series.clear();
        }
        return n;
    }

    /**
     * Hands every pending point to {@code consumer} in order and frees its
     * entry. Emits that arrive meanwhile wait for the next drain. Only one
     * thread at a time.
     *
     * @return the number of points drained
     */
    int drain(Consumer consumer) {
        int n = swap();
        Slot[] taken = spare;
        for (int i = 0; i < n; i++) {
            Slot s = taken[i];
            try {
                consumer.accept(s);
            } finally {
                // Released even if the consumer throws: the caller's strings
                // and arrays are not kept alive until the slot is reused.
                s.name = null;
                s.tags = null;
            }
        }
        return n;
    }
}
