// Record batches (magic 2) as the Java client (kafka-clients) reads and
// writes them, for crates/sonde-kafka/tests/golden_java.rs, which compiles
// this file with `javac -cp "$LIBS/*"` against the broker's jars and
// compares sonde's batches with these. No broker is involved.
//
//   java -cp "$LIBS/*:DIR" KafkaGolden decode FILE
//
// reads the batches concatenated in FILE with MemoryRecords, checks each
// (ensureValid: size, magic and CRC-32C) and prints one JSON line per
// batch: its header fields and its records (offset, timestamp, key,
// value, headers; bytes in hex, null as null). Bytes after the last whole
// batch are an error.
//
//   java -cp "$LIBS/*:DIR" KafkaGolden encode SPEC
//
// writes to stdout the batches SPEC describes, built with
// MemoryRecords.builder, concatenated. SPEC has one item a line, tokens
// separated by spaces, bytes as `x:` and hex (`x:` alone is empty) or
// `null`:
//
//   batch CODEC PRODUCER_ID EPOCH BASE_SEQUENCE TRANSACTIONAL(0|1) [control commit|abort]
//   record TIMESTAMP KEY VALUE [HEADER_KEY HEADER_VALUE]...
//
// Each `batch` line starts a batch (base offset 0, no partition leader
// epoch, create time); the `record` lines after it are its records (for a
// control batch, one record line gives the marker's timestamp; its key
// and value are ignored). Header keys are UTF-8.

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.CompressionType;
import org.apache.kafka.common.record.ControlRecordType;
import org.apache.kafka.common.record.EndTransactionMarker;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MemoryRecordsBuilder;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.record.TimestampType;

public final class KafkaGolden {
    private static final String HEX = "0123456789abcdef";

    public static void main(String[] args) throws Exception {
        if (args.length == 2 && args[0].equals("decode")) {
            decode(Files.readAllBytes(Paths.get(args[1])));
        } else if (args.length == 2 && args[0].equals("encode")) {
            encode(Files.readAllLines(Paths.get(args[1]), StandardCharsets.UTF_8));
        } else {
            System.err.println("usage: KafkaGolden decode FILE | encode SPEC");
            System.exit(2);
        }
    }

    private static void decode(byte[] data) {
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(data));
        StringBuilder out = new StringBuilder();
        int read = 0;
        for (MutableRecordBatch batch : records.batches()) {
            batch.ensureValid();
            read += batch.sizeInBytes();
            out.append("{\"base_offset\":").append(batch.baseOffset())
                .append(",\"last_offset_delta\":").append(batch.lastOffset() - batch.baseOffset())
                .append(",\"magic\":").append(batch.magic())
                .append(",\"partition_leader_epoch\":").append(batch.partitionLeaderEpoch())
                .append(",\"codec\":\"").append(batch.compressionType().name).append('"')
                .append(",\"codec_id\":").append(batch.compressionType().id)
                .append(",\"timestamp_type\":\"").append(batch.timestampType()).append('"')
                .append(",\"transactional\":").append(batch.isTransactional())
                .append(",\"control\":").append(batch.isControlBatch())
                .append(",\"producer_id\":").append(batch.producerId())
                .append(",\"producer_epoch\":").append(batch.producerEpoch())
                .append(",\"base_sequence\":").append(batch.baseSequence())
                .append(",\"max_timestamp\":").append(batch.maxTimestamp())
                .append(",\"count\":").append(batch.countOrNull())
                .append(",\"records\":[");
            boolean first = true;
            for (Record r : batch) {
                r.ensureValid();
                if (!first) {
                    out.append(',');
                }
                first = false;
                out.append("{\"offset\":").append(r.offset())
                    .append(",\"timestamp\":").append(r.timestamp())
                    .append(",\"key\":").append(hex(r.key()))
                    .append(",\"value\":").append(hex(r.value()))
                    .append(",\"headers\":[");
                Header[] headers = r.headers();
                for (int i = 0; i < headers.length; i++) {
                    if (i > 0) {
                        out.append(',');
                    }
                    byte[] key = headers[i].key().getBytes(StandardCharsets.UTF_8);
                    out.append('[').append(hex(ByteBuffer.wrap(key))).append(',');
                    byte[] value = headers[i].value();
                    out.append(value == null ? "null" : hex(ByteBuffer.wrap(value))).append(']');
                }
                out.append("]}");
            }
            out.append("]}\n");
        }
        if (read != data.length) {
            throw new IllegalStateException(
                (data.length - read) + " bytes after the last whole batch (of " + data.length + ")");
        }
        System.out.print(out);
        System.out.flush();
    }

    private static String hex(ByteBuffer b) {
        if (b == null) {
            return "null";
        }
        StringBuilder s = new StringBuilder(2 + 2 * b.remaining()).append('"');
        while (b.hasRemaining()) {
            int v = b.get() & 0xff;
            s.append(HEX.charAt(v >> 4)).append(HEX.charAt(v & 15));
        }
        return s.append('"').toString();
    }

    private static byte[] bytes(String token) {
        if (token.equals("null")) {
            return null;
        }
        if (!token.startsWith("x:") || token.length() % 2 != 0) {
            throw new IllegalArgumentException("bytes are x:HEX or null, not " + token);
        }
        byte[] b = new byte[(token.length() - 2) / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(token.substring(2 + 2 * i, 4 + 2 * i), 16);
        }
        return b;
    }

    private static void encode(List<String> spec) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        MemoryRecordsBuilder builder = null;
        boolean control = false;
        ControlRecordType marker = null;
        for (String line : spec) {
            String[] t = line.trim().split(" ");
            if (t[0].isEmpty()) {
                continue;
            }
            if (t[0].equals("batch")) {
                finish(builder, out);
                Compression codec = Compression.of(CompressionType.forName(t[1])).build();
                control = t.length > 6 && t[6].equals("control");
                marker = control
                    ? (t[7].equals("commit") ? ControlRecordType.COMMIT : ControlRecordType.ABORT)
                    : null;
                builder = MemoryRecords.builder(
                    ByteBuffer.allocate(1024), RecordBatch.CURRENT_MAGIC_VALUE, codec,
                    TimestampType.CREATE_TIME, 0L, RecordBatch.NO_TIMESTAMP,
                    Long.parseLong(t[2]), Short.parseShort(t[3]), Integer.parseInt(t[4]),
                    t[5].equals("1"), control, RecordBatch.NO_PARTITION_LEADER_EPOCH);
            } else if (t[0].equals("record")) {
                long timestamp = Long.parseLong(t[1]);
                if (control) {
                    builder.appendEndTxnMarker(timestamp, new EndTransactionMarker(marker, 0));
                    continue;
                }
                List<Header> headers = new ArrayList<>();
                for (int i = 4; i + 1 < t.length; i += 2) {
                    headers.add(new RecordHeader(
                        new String(bytes(t[i]), StandardCharsets.UTF_8), bytes(t[i + 1])));
                }
                builder.append(timestamp, bytes(t[2]), bytes(t[3]), headers.toArray(new Header[0]));
            } else {
                throw new IllegalArgumentException("unknown spec line: " + line);
            }
        }
        finish(builder, out);
        OutputStream stdout = System.out;
        out.writeTo(stdout);
        stdout.flush();
    }

    private static void finish(MemoryRecordsBuilder builder, ByteArrayOutputStream out) {
        if (builder == null) {
            return;
        }
        ByteBuffer b = builder.build().buffer();
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        out.write(bytes, 0, bytes.length);
    }
}
