package dev.sonde.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Supplier;

/**
 * A client that sends metric points to the sonde agent over the msgpack
 * wire protocol (the contract is {@code sdk/SPEC.md}).
 *
 * <pre>{@code
 * try (SondeClient client = SondeClient.builder().prefix("checkout").build()) {
 *     client.counter("requests", 1, Tag.of("host", "a"));
 *     try (Timing t = client.time("db.query")) {
 *         runQuery();
 *     }
 * }
 * }</pre>
 *
 * <h2>Threading and cost</h2>
 * Every method is safe to call from any thread. An emit ({@link #counter},
 * {@link #timer}, ...) checks its arguments, then adds the point to a
 * bounded buffer under a short lock and returns: it never waits for I/O
 * and allocates nothing beyond the varargs array (and a map node for the
 * first emit of a counter or store series in a flush). Rendering tags,
 * joining the prefix, formatting the value, encoding and sending all
 * happen on a daemon flusher thread, every flush interval (200 ms by
 * default) and as soon as the buffer fills. The buffer holds
 * {@link Builder#bufferSize} entries; when they are all taken the point is
 * dropped and counted in {@link #dropped()}.
 *
 * <p>The tags array of an emit is read later by the flusher, not copied:
 * do not modify an array after passing it. ({@link Tag}s themselves are
 * immutable.)
 *
 * <h2>What is sent</h2>
 * Within one flush, {@code counter} and {@code rate_counter} emits of the
 * same type, name and tags are summed into one entry as they are emitted,
 * and a {@code store} replaces the value of its series' entry (the agent
 * keeps a window's last), so these take no room once their series is
 * pending: a hot loop over fewer series than the buffer holds loses
 * nothing. The entry goes out at the place of the series' first emit;
 * every other emit is its own message, in emit order. Messages
 * travel in datagrams under 32 KiB. A send that fails is counted in
 * {@link #sendErrors()} (never thrown to an emitting caller), and the
 * socket is reopened for the next datagram, so a restarted agent is found
 * again.
 *
 * <h2>Lifecycle</h2>
 * {@link #flush()} sends everything pending before it returns.
 * {@link #close()} flushes, stops the flusher and closes the socket; emits
 * after it are counted as drops. The flusher is a daemon thread, so call
 * {@code close()} (try-with-resources, or a shutdown hook) before the JVM
 * exits, or the last interval's points are lost.
 */
public final class SondeClient implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger(SondeClient.class.getName());
    private static final Tag[] NO_TAGS = new Tag[0];
    private static final AtomicLong THREADS = new AtomicLong();
    private static final Transport.Factory DEFAULT_FACTORY = ChannelTransport::open;

    private final String prefix;
    private final Address address;
    private final PointBuffer buffer;
    private final long intervalNanos;
    private final AtomicLong dropped = new AtomicLong();
    private final AtomicLong sendErrors = new AtomicLong();
    /** Held by whoever drains and sends: the flusher, flush() or close(). */
    private final ReentrantLock flushLock = new ReentrantLock();
    private final FlushCycle cycle;
    private final Thread flusher;
    private final AtomicBoolean closing = new AtomicBoolean();
    private volatile boolean closed;
    /** Set by an emit that filled the buffer; cleared by the flusher when it starts a flush. */
    private volatile boolean wakeRequested;

    private SondeClient(Builder b) {
        this.prefix = b.prefix;
        this.address = b.resolvedAddress();
        this.buffer = new PointBuffer(b.bufferSize);
        this.intervalNanos = b.flushInterval.toNanos();
        this.cycle = new FlushCycle(prefix, buffer, address, b.factory, dropped, sendErrors);
        this.flusher = new Thread(this::runFlusher, "sonde-flusher-" + THREADS.incrementAndGet());
        this.flusher.setDaemon(true);
        this.flusher.start();
    }

    /**
     * A builder with the defaults: address by the default rule (see
     * {@link Builder#address}), no prefix, a buffer of 10,000 points, a
     * flush every 200 ms.
     *
     * @return a new builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * A client with every default; the same as {@code builder().build()}.
     *
     * @return a new, running client
     */
    public static SondeClient create() {
        return builder().build();
    }

    // ---- counter --------------------------------------------------------

    /**
     * Adds to a counter. The agent reports its running total.
     *
     * @param name the metric name, joined to the prefix with a dot
     * @param value the amount to add
     * @param tags the point's tags, sent in this order
     * @throws IllegalArgumentException if the name is empty or contains
     *     {@code |}, {@code =}, a space, {@code \n} or {@code \r}, or the value is not finite
     */
    public void counter(String name, double value, Tag... tags) {
        emit(MetricType.COUNTER, name, value, tags, 0);
    }

    /**
     * Adds to a counter, with tags from a map, sent sorted by key.
     *
     * @param name the metric name
     * @param value the amount to add
     * @param tags the point's tags
     * @throws IllegalArgumentException if the name, a tag or the value is invalid
     */
    public void counter(String name, double value, Map<String, String> tags) {
        emit(MetricType.COUNTER, name, value, sorted(tags), 0);
    }

    // ---- rate_counter ---------------------------------------------------

    /**
     * Adds to a rate counter. The agent reports the window's sum per second.
     *
     * @param name the metric name
     * @param value the amount to add
     * @param tags the point's tags, sent in this order
     * @throws IllegalArgumentException if the name or value is invalid
     */
    public void rateCounter(String name, double value, Tag... tags) {
        emit(MetricType.RATE_COUNTER, name, value, tags, 0);
    }

    /**
     * Adds to a rate counter, with tags from a map, sent sorted by key.
     *
     * @param name the metric name
     * @param value the amount to add
     * @param tags the point's tags
     * @throws IllegalArgumentException if the name, a tag or the value is invalid
     */
    public void rateCounter(String name, double value, Map<String, String> tags) {
        emit(MetricType.RATE_COUNTER, name, value, sorted(tags), 0);
    }

    // ---- meter ----------------------------------------------------------

    /**
     * Marks a meter. The agent reports the running total and
     * {@code NAME.rate}, the window's sum per second.
     *
     * @param name the metric name
     * @param value the amount
     * @param tags the point's tags, sent in this order
     * @throws IllegalArgumentException if the name or value is invalid
     */
    public void meter(String name, double value, Tag... tags) {
        emit(MetricType.METER, name, value, tags, 0);
    }

    /**
     * Marks a meter, with tags from a map, sent sorted by key.
     *
     * @param name the metric name
     * @param value the amount
     * @param tags the point's tags
     * @throws IllegalArgumentException if the name, a tag or the value is invalid
     */
    public void meter(String name, double value, Map<String, String> tags) {
        emit(MetricType.METER, name, value, sorted(tags), 0);
    }

    // ---- timer ----------------------------------------------------------

    /**
     * Records a duration (by convention in milliseconds). The agent reports
     * {@code .min .max .avg .sum .counter} and percentiles.
     *
     * @param name the metric name
     * @param value the duration
     * @param tags the point's tags, sent in this order
     * @throws IllegalArgumentException if the name or value is invalid
     */
    public void timer(String name, double value, Tag... tags) {
        emit(MetricType.TIMER, name, value, tags, 0);
    }

    /**
     * Records a duration, with tags from a map, sent sorted by key.
     *
     * @param name the metric name
     * @param value the duration
     * @param tags the point's tags
     * @throws IllegalArgumentException if the name, a tag or the value is invalid
     */
    public void timer(String name, double value, Map<String, String> tags) {
        emit(MetricType.TIMER, name, value, sorted(tags), 0);
    }

    // ---- store ----------------------------------------------------------

    /**
     * Sets a gauge. The agent reports the last value of the window.
     *
     * @param name the metric name
     * @param value the value
     * @param tags the point's tags, sent in this order
     * @throws IllegalArgumentException if the name or value is invalid
     */
    public void store(String name, double value, Tag... tags) {
        emit(MetricType.STORE, name, value, tags, 0);
    }

    /**
     * Sets a gauge, with tags from a map, sent sorted by key.
     *
     * @param name the metric name
     * @param value the value
     * @param tags the point's tags
     * @throws IllegalArgumentException if the name, a tag or the value is invalid
     */
    public void store(String name, double value, Map<String, String> tags) {
        emit(MetricType.STORE, name, value, sorted(tags), 0);
    }

    // ---- ts_store -------------------------------------------------------

    /**
     * Sets a gauge at a timestamp of the caller's choosing. The agent
     * reports the last value per timestamp.
     *
     * @param name the metric name
     * @param value the value
     * @param unixSeconds the point's time, in seconds since the epoch
     * @param tags the point's tags, sent in this order
     * @throws IllegalArgumentException if the name or value is invalid
     */
    public void tsStore(String name, double value, long unixSeconds, Tag... tags) {
        emit(MetricType.TS_STORE, name, value, tags, unixSeconds);
    }

    /**
     * Sets a gauge at a timestamp, with tags from a map, sent sorted by key.
     *
     * @param name the metric name
     * @param value the value
     * @param unixSeconds the point's time, in seconds since the epoch
     * @param tags the point's tags
     * @throws IllegalArgumentException if the name, a tag or the value is invalid
     */
    public void tsStore(String name, double value, long unixSeconds, Map<String, String> tags) {
        emit(MetricType.TS_STORE, name, value, sorted(tags), unixSeconds);
    }

    // ---- histogram ------------------------------------------------------

    /**
     * Records a sample into a histogram. The agent reports cumulative
     * {@code .bucket} counts per bound, {@code .sum} and {@code .count}.
     *
     * @param name the metric name
     * @param value the sample
     * @param tags the point's tags, sent in this order
     * @throws IllegalArgumentException if the name or value is invalid
     */
    public void histogram(String name, double value, Tag... tags) {
        emit(MetricType.HISTOGRAM, name, value, tags, 0);
    }

    /**
     * Records a histogram sample, with tags from a map, sent sorted by key.
     *
     * @param name the metric name
     * @param value the sample
     * @param tags the point's tags
     * @throws IllegalArgumentException if the name, a tag or the value is invalid
     */
    public void histogram(String name, double value, Map<String, String> tags) {
        emit(MetricType.HISTOGRAM, name, value, sorted(tags), 0);
    }

    // ---- timing helpers -------------------------------------------------

    /**
     * Starts a timer; closing it emits a {@code timer} point with the
     * elapsed milliseconds. Meant for try-with-resources.
     *
     * @param name the metric name, checked now
     * @param tags the point's tags
     * @return the running timer
     * @throws IllegalArgumentException if the name is invalid
     */
    public Timing time(String name, Tag... tags) {
        Validation.checkName(name);
        return new Timing(this, name, checkTags(name, tags));
    }

    /**
     * Runs {@code task} and emits its duration in milliseconds as a
     * {@code timer} point, also when it throws.
     *
     * @param name the metric name, checked before the task runs
     * @param task the work to time
     * @param tags the point's tags
     * @throws IllegalArgumentException if the name is invalid
     */
    public void time(String name, Runnable task, Tag... tags) {
        Objects.requireNonNull(task, "task");
        Timing t = time(name, tags);
        try {
            task.run();
        } finally {
            t.close();
        }
    }

    /**
     * Calls {@code task} and emits its duration in milliseconds as a
     * {@code timer} point, also when it throws.
     *
     * @param <T> the result type
     * @param name the metric name, checked before the task runs
     * @param task the work to time
     * @param tags the point's tags
     * @return what {@code task} returned
     * @throws IllegalArgumentException if the name is invalid
     */
    public <T> T time(String name, Supplier<T> task, Tag... tags) {
        Objects.requireNonNull(task, "task");
        Timing t = time(name, tags);
        try {
            return task.get();
        } finally {
            t.close();
        }
    }

    // ---- flushing and state ---------------------------------------------

    /**
     * Sends everything emitted so far, on the calling thread, before
     * returning. Does nothing after {@link #close()}.
     */
    public void flush() {
        if (closed) {
            return;
        }
        flushLock.lock();
        try {
            cycle.run();
        } finally {
            flushLock.unlock();
        }
    }

    /**
     * Flushes, stops the flusher thread and closes the socket. Emits after
     * this are dropped and counted in {@link #dropped()}. Closing again
     * does nothing.
     */
    @Override
    public void close() {
        if (!closing.compareAndSet(false, true)) {
            return;
        }
        closed = true;
        LockSupport.unpark(flusher);
        boolean interrupted = false;
        while (flusher.isAlive()) {
            try {
                flusher.join();
            } catch (InterruptedException e) {
                // Finish closing anyway; the interrupt is restored below.
                interrupted = true;
            }
        }
        flushLock.lock();
        try {
            cycle.run();
            cycle.closeTransport();
        } finally {
            flushLock.unlock();
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * Points dropped because the buffer was full, because the client was
     * closed, or because a summed counter overflowed to infinity.
     *
     * @return the number of dropped points since the client was built
     */
    public long dropped() {
        return dropped.get();
    }

    /**
     * Datagrams that could not be sent (the agent was unreachable, or had
     * no room for them within 100 ms).
     *
     * @return the number of failed sends since the client was built
     */
    public long sendErrors() {
        return sendErrors.get();
    }

    /**
     * The prefix joined to every name.
     *
     * @return the prefix, {@code ""} when there is none
     */
    public String prefix() {
        return prefix;
    }

    /**
     * Where this client sends, as an address string such as
     * {@code udp://127.0.0.1:9123}.
     *
     * @return the resolved address
     */
    public String address() {
        return address.toString();
    }

    /** The flusher thread, for tests. */
    Thread flusherThread() {
        return flusher;
    }

    // ---- internals ------------------------------------------------------

    private void emit(MetricType type, String name, double value, Tag[] tags, long ts) {
        Validation.checkName(name);
        Validation.checkValue(name, value);
        tags = checkTags(name, tags);
        if (closed) {
            dropped.incrementAndGet();
            return;
        }
        int r = buffer.offer(type, name, value, tags, ts);
        if (r != PointBuffer.ACCEPTED) {
            if (r == PointBuffer.FULL) {
                dropped.incrementAndGet();
            }
            wakeFlusher();
        }
    }

    /** Null-safe tags: a null array means none; a null element is a caller bug, reported now. */
    private static Tag[] checkTags(String name, Tag[] tags) {
        if (tags == null) {
            return NO_TAGS;
        }
        for (Tag t : tags) {
            if (t == null) {
                throw new NullPointerException("a tag of " + Validation.quote(name) + " is null");
            }
        }
        return tags;
    }

    /** A map's entries as tags sorted by key, each checked. */
    private static Tag[] sorted(Map<String, String> tags) {
        if (tags == null || tags.isEmpty()) {
            return NO_TAGS;
        }
        Map<String, String> byKey = tags instanceof TreeMap && ((TreeMap<String, String>) tags).comparator() == null
                ? tags
                : new TreeMap<>(tags);
        Tag[] out = new Tag[byKey.size()];
        int i = 0;
        for (Map.Entry<String, String> e : byKey.entrySet()) {
            out[i++] = new Tag(e.getKey(), e.getValue());
        }
        return out;
    }

    private void wakeFlusher() {
        // One unpark per fill, not one per dropped emit while it stays full.
        if (!wakeRequested) {
            wakeRequested = true;
            LockSupport.unpark(flusher);
        }
    }

    private void runFlusher() {
        long next = System.nanoTime() + intervalNanos;
        while (!closed) {
            long wait = next - System.nanoTime();
            if (wait > 0 && !wakeRequested) {
                LockSupport.parkNanos(this, wait);
                continue;
            }
            wakeRequested = false;
            next = System.nanoTime() + intervalNanos;
            flushLock.lock();
            try {
                if (!closed) {
                    cycle.run();
                }
            } catch (RuntimeException | Error e) {
                // A bug must not silently end all sending; report it and go on.
                LOG.log(Level.ERROR, "sonde: flush failed", e);
                if (e instanceof Error) {
                    throw (Error) e;
                }
            } finally {
                flushLock.unlock();
            }
        }
    }

    /** Configures a {@link SondeClient}. Not thread-safe; {@link #build()} may be called more than once. */
    public static final class Builder {
        private String address;
        private String prefix = "";
        private int bufferSize = 10_000;
        private Duration flushInterval = Duration.ofMillis(200);
        private Transport.Factory factory = DEFAULT_FACTORY;

        private Builder() {}

        /**
         * Where to send: {@code udp://HOST:PORT},
         * {@code unixgram:///path} or {@code unixseq:///path}. Unix
         * addresses need junixsocket on the classpath (see README.md).
         *
         * <p>When not set: the {@code SONDE_ADDRESS} environment variable if
         * set and non-empty; else {@code unixgram:///tmp/metric.sock} if that
         * file exists and unix sockets are available; else
         * {@code udp://127.0.0.1:9123}.
         *
         * @param address the address string
         * @return this builder
         * @throws IllegalArgumentException if the address cannot be parsed
         */
        public Builder address(String address) {
            Address.parse(address);
            this.address = address;
            return this;
        }

        /**
         * A prefix joined to every name with a dot ({@code prefix.name});
         * {@code ""} (the default) for none.
         *
         * @param prefix the prefix
         * @return this builder
         * @throws IllegalArgumentException if it contains {@code |}, {@code =}, a space, {@code \n} or {@code \r}
         */
        public Builder prefix(String prefix) {
            Validation.checkPrefix(prefix);
            this.prefix = prefix;
            return this;
        }

        /**
         * How many entries the buffer holds between flushes (default
         * 10,000): one per counter or store series, one per other emit.
         * When it is full, further points are dropped and counted.
         *
         * @param points the capacity, at least 1
         * @return this builder
         * @throws IllegalArgumentException if {@code points < 1}
         */
        public Builder bufferSize(int points) {
            if (points < 1) {
                throw new IllegalArgumentException("bufferSize must be at least 1, got " + points);
            }
            this.bufferSize = points;
            return this;
        }

        /**
         * How often the flusher sends (default 200 ms). It also sends as
         * soon as the buffer is full.
         *
         * @param interval a positive duration
         * @return this builder
         * @throws IllegalArgumentException if the interval is zero or negative
         */
        public Builder flushInterval(Duration interval) {
            Objects.requireNonNull(interval, "interval");
            if (interval.isZero() || interval.isNegative()) {
                throw new IllegalArgumentException("flushInterval must be positive, got " + interval);
            }
            this.flushInterval = interval;
            return this;
        }

        /** Replaces how sockets are opened; for tests. */
        Builder transportFactory(Transport.Factory factory) {
            this.factory = Objects.requireNonNull(factory, "factory");
            return this;
        }

        private Address resolvedAddress() {
            Address a = Address.resolve(address);
            if (a.isUnix() && factory == DEFAULT_FACTORY) {
                requireUnix(a);
            }
            return a;
        }

        /**
         * Builds the client and starts its flusher thread. The socket is
         * opened on the flusher thread at the first send, so an agent that
         * is not running yet is not an error here.
         *
         * @return a running client
         * @throws IllegalArgumentException if the address (given, or from
         *     {@code SONDE_ADDRESS}) is invalid, or is a unix address and
         *     unix sockets are not available in this process
         */
        public SondeClient build() {
            return new SondeClient(this);
        }
    }

    private static void requireUnix(Address a) {
        String problem = UnixSupport.problem();
        if (problem != null) {
            throw new IllegalArgumentException("cannot send to " + a + ": " + problem);
        }
    }
}
