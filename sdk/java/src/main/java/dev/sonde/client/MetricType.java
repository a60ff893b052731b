package dev.sonde.client;

import java.nio.charset.StandardCharsets;

/** The seven msgpack metric types, with their wire names pre-encoded. */
enum MetricType {
    COUNTER("counter", true),
    RATE_COUNTER("rate_counter", true),
    METER("meter", false),
    TIMER("timer", false),
    STORE("store", false),
    TS_STORE("ts_store", false),
    HISTOGRAM("histogram", false);

    /** The TYPE field as it goes on the wire. */
    final String wireName;
    /**
     * The TYPE field already msgpack-encoded (fixstr header and bytes), so
     * the flusher copies it instead of encoding the same seven strings for
     * every message.
     */
    final byte[] encoded;
    /** Whether emits of one series are summed into one message per flush (SPEC.md). */
    final boolean summed;

    MetricType(String wireName, boolean summed) {
        this.wireName = wireName;
        this.summed = summed;
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
