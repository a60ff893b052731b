package dev.sonde.client;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Encodes one {@code ["emit", TYPE, NAME, VALUE, TAGS, TS]} message into a
 * reusable byte array: the subset of msgpack the wire protocol needs
 * (a fixarray of six strings, each in its smallest str form).
 *
 * <p>Hand-written instead of a msgpack library so the client has no
 * runtime dependency; the whole subset is the four str headers below.
 * Not thread-safe: the flusher owns one.
 */
final class MsgpackWriter {
    /** fixarray(6) followed by fixstr "emit": the first six bytes of every message. */
    private static final byte[] HEAD = {
        (byte) 0x96, (byte) 0xa4, 'e', 'm', 'i', 't'
    };

    private byte[] buf;
    private int size;

    MsgpackWriter() {
        this(512);
    }

    MsgpackWriter(int initialCapacity) {
        buf = new byte[initialCapacity];
    }

    /** The encoded bytes; valid up to {@link #size()} until the next {@link #reset()}. */
    byte[] array() {
        return buf;
    }

    int size() {
        return size;
    }

    void reset() {
        size = 0;
    }

    /** Appends one message; {@code type} is the pre-encoded TYPE field. */
    void writeMessage(byte[] type, String name, String value, String tags, String ts) {
        ensure(HEAD.length + type.length);
        System.arraycopy(HEAD, 0, buf, size, HEAD.length);
        size += HEAD.length;
        System.arraycopy(type, 0, buf, size, type.length);
        size += type.length;
        writeStr(name);
        writeStr(value);
        writeStr(tags);
        writeStr(ts);
    }

    /** Appends {@code s} as a msgpack str in its smallest form. */
    void writeStr(String s) {
        int n = s.length();
        if (isAscii(s, n)) {
            // The common case: one byte per char, no intermediate byte[].
            writeStrHeader(n);
            ensure(n);
            for (int i = 0; i < n; i++) {
                buf[size + i] = (byte) s.charAt(i);
            }
            size += n;
        } else {
            byte[] utf8 = s.getBytes(StandardCharsets.UTF_8);
            writeStrHeader(utf8.length);
            ensure(utf8.length);
            System.arraycopy(utf8, 0, buf, size, utf8.length);
            size += utf8.length;
        }
    }

    private static boolean isAscii(String s, int n) {
        for (int i = 0; i < n; i++) {
            if (s.charAt(i) >= 0x80) {
                return false;
            }
        }
        return true;
    }

    /** fixstr up to 31 bytes, then str8, str16, str32. */
    private void writeStrHeader(int len) {
        ensure(5);
        if (len <= 31) {
            buf[size++] = (byte) (0xa0 | len);
        } else if (len <= 0xff) {
            buf[size++] = (byte) 0xd9;
            buf[size++] = (byte) len;
        } else if (len <= 0xffff) {
            buf[size++] = (byte) 0xda;
            buf[size++] = (byte) (len >>> 8);
            buf[size++] = (byte) len;
        } else {
            buf[size++] = (byte) 0xdb;
            buf[size++] = (byte) (len >>> 24);
            buf[size++] = (byte) (len >>> 16);
            buf[size++] = (byte) (len >>> 8);
            buf[size++] = (byte) len;
        }
    }

    private void ensure(int more) {
        if (size + more > buf.length) {
            buf = Arrays.copyOf(buf, Math.max(buf.length * 2, size + more));
        }
    }
}
