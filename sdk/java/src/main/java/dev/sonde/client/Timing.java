package dev.sonde.client;

/**
 * A running timer from {@link SondeClient#time(String, Tag...)}: closing it
 * emits a {@code timer} point with the elapsed milliseconds.
 *
 * <pre>{@code
 * try (Timing t = client.time("db.query", Tag.of("table", "users"))) {
 *     runQuery();
 * }
 * }</pre>
 *
 * <p>Closing twice emits once. Not meant to be shared between threads.
 */
public final class Timing implements AutoCloseable {
    private final SondeClient client;
    private final String name;
    private final Tag[] tags;
    private final long start;
    private boolean closed;

    Timing(SondeClient client, String name, Tag[] tags) {
        this.client = client;
        this.name = name;
        this.tags = tags;
        this.start = System.nanoTime();
    }

    /**
     * Milliseconds since the timer started, with sub-millisecond precision.
     *
     * @return the elapsed time in milliseconds
     */
    public double elapsedMillis() {
        return (System.nanoTime() - start) / 1e6;
    }

    /** Emits the elapsed milliseconds as a {@code timer} point, the first time only. */
    @Override
    public void close() {
        if (!closed) {
            closed = true;
            client.timer(name, elapsedMillis(), tags);
        }
    }
}
