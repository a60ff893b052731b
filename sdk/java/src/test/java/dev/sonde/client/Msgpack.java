package dev.sonde.client;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

/**
 * A strict decoder for what the client sends, for assertions: a datagram
 * is one fixarray-of-6 message or an array16 bunch of them, every field a
 * str. Anything else fails the test, so it also checks the encoding rules
 * (smallest str form, array16 for bunches) rather than accepting any
 * valid msgpack.
 */
final class Msgpack {
    private Msgpack() {}

    /** The messages of one datagram, each as its six fields. */
    static List<List<String>> decode(byte[] d) {
        Reader r = new Reader(d);
        List<List<String>> out = new ArrayList<>();
        int first = d[0] & 0xff;
        if (first == 0x96) {
            out.add(r.message());
        } else if (first == 0xdc) {
            r.pos = 3;
            int n = ((d[1] & 0xff) << 8) | (d[2] & 0xff);
            if (n < 2) {
                throw new AssertionError("a bunch of " + n + " message(s); one message goes bare");
            }
            for (int i = 0; i < n; i++) {
                out.add(r.message());
            }
        } else {
            throw new AssertionError("datagram starts with 0x" + Integer.toHexString(first));
        }
        if (r.pos != d.length) {
            throw new AssertionError((d.length - r.pos) + " trailing bytes");
        }
        return out;
    }

    static String hex(byte[] b) {
        return HexFormat.of().formatHex(b);
    }

    private static final class Reader {
        final byte[] d;
        int pos;

        Reader(byte[] d) {
            this.d = d;
        }

        List<String> message() {
            int h = d[pos++] & 0xff;
            if (h != 0x96) {
                throw new AssertionError("message header 0x" + Integer.toHexString(h) + " at " + (pos - 1));
            }
            List<String> fields = new ArrayList<>(6);
            for (int i = 0; i < 6; i++) {
                fields.add(str());
            }
            if (!fields.get(0).equals("emit")) {
                throw new AssertionError("command " + fields.get(0));
            }
            return fields;
        }

        String str() {
            int h = d[pos++] & 0xff;
            int len;
            int minLen;
            if ((h & 0xe0) == 0xa0) {
                len = h & 0x1f;
                minLen = 0;
            } else if (h == 0xd9) {
                len = d[pos++] & 0xff;
                minLen = 32;
            } else if (h == 0xda) {
                len = ((d[pos] & 0xff) << 8) | (d[pos + 1] & 0xff);
                pos += 2;
                minLen = 256;
            } else if (h == 0xdb) {
                len = ((d[pos] & 0xff) << 24) | ((d[pos + 1] & 0xff) << 16)
                        | ((d[pos + 2] & 0xff) << 8) | (d[pos + 3] & 0xff);
                pos += 4;
                minLen = 65536;
            } else {
                throw new AssertionError("not a str header: 0x" + Integer.toHexString(h));
            }
            if (len < minLen) {
                throw new AssertionError("str of " + len + " bytes not in its smallest form");
            }
            String s = new String(d, pos, len, StandardCharsets.UTF_8);
            pos += len;
            return s;
        }
    }
}
