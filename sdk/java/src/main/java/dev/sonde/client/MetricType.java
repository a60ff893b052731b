package dev.sonde.client;

import java.nio.charset.StandardCharsets;

/** The seven msgpack metric types, with their wire names pre-encoded. */
enum MetricType {
    COUNTER("counter", Merge.ADD),
    RATE_COUNTER("rate_counter", Merge.ADD),
    METER("meter", Merge.NONE),
    TIMER("timer", Merge.NONE),
    STORE("store", Merge.REPLACE),
    TS_STORE("ts_store", Merge.NONE),
    HISTOGRAM("histogram", Merge.NONE);

    /** How an emit for a series already pending joins its entry (SPEC.md, Client behaviour). */
    enum Merge {
        /** Every emit is its own entry and message. */
        NONE,
        /** The value is added to the pending one. */
        ADD,
        /** The value replaces the pending one: the agent keeps a window's last. */
        REPLACE
    }

    /** The TYPE field as it goes on the wire. */
    final String wireName;
    /**
     * The TYPE field already msgpack-encoded (fixstr header and bytes), so
     * the flusher copies it instead of encoding the same seven strings for
     * every message.
     */
    final byte[] encoded;
    /** How emits of one series are merged into one pending entry. */
    final Merge merge;

    MetricType(String wireName, Merge merge) {
        this.wireName = wireName;
        this.merge = merge;
        byte[] ascii = wireName.getBytes(StandardCharsets.US_ASCII);
        this.encoded = new byte[ascii.length + 1];
        this.encoded[0] = (byte) (0xa0 | ascii.length);
        System.arraycopy(ascii, 0, this.encoded, 1, ascii.length);
    }

    /** The type whose wire name is {@code name}, or {@code null}. */
    static MetricType fromWireName(String name) {
        for (MetricType t : values()) {
            if (t.wireName.equals(name)) {
                return t;
            }
        }
        return null;
    }
}
