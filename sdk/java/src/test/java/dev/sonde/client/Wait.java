package dev.sonde.client;

import java.time.Duration;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/** Waiting on conditions with a deadline: tests never sleep a fixed time and hope. */
final class Wait {
    private Wait() {}

    static void until(String what, Duration timeout, BooleanSupplier cond) {
        forValue(what, timeout, () -> cond.getAsBoolean() ? Boolean.TRUE : null);
    }

    static <T> T forValue(String what, Duration timeout, Supplier<T> cond) {
        long deadline = System.nanoTime() + timeout.toNanos();
        for (;;) {
            T v = cond.get();
            if (v != null) {
                return v;
            }
            if (System.nanoTime() - deadline > 0) {
                throw new AssertionError("timed out after " + timeout + " waiting for " + what);
            }
            try {
                Thread.sleep(10);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted waiting for " + what, e);
            }
        }
    }
}
