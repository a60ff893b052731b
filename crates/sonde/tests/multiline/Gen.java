// Writes what a Java service's log looks like when it logs requests and,
// now and then, an exception (with causes, suppressed exceptions and
// "... n more" frames) the way logback and log4j do: the message line,
// then Throwable.printStackTrace. The log text goes to args[0], each
// record to args[1], NUL-separated, for the multiline test to compare.
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.List;

public class Gen {
    static void store(int i) throws java.io.IOException {
        throw new java.io.IOException("disk full at request " + i);
    }

    static void handle(int i) {
        try {
            store(i);
        } catch (java.io.IOException e) {
            IllegalStateException top = new IllegalStateException("request " + i + " failed", e);
            top.addSuppressed(new RuntimeException("cleanup failed"));
            throw top;
        }
    }

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[2]);
        List<String> records = new ArrayList<>();
        StringBuilder text = new StringBuilder();
        for (int i = 0; i < n; i++) {
            String head = LocalDateTime.now() + " ";
            String record;
            if (i % 7 == 3) {
                StringWriter trace = new StringWriter();
                try {
                    handle(i);
                } catch (IllegalStateException e) {
                    e.printStackTrace(new PrintWriter(trace, true));
                }
                record = head + "ERROR [main] app.Gen - request " + i + " failed\n" + trace;
            } else {
                record = head + "INFO  [main] app.Gen - request " + i + " served\n";
            }
            text.append(record);
            records.add(record.substring(0, record.length() - 1));
        }
        Files.writeString(Path.of(args[0]), text);
        Files.writeString(Path.of(args[1]), String.join("\0", records));
    }
}
