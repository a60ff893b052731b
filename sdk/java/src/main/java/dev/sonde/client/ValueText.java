package dev.sonde.client;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;

/**
 * Writes a VALUE field as text, per SPEC.md ("Message encoding"), at most
 * 25 bytes:
 *
 * <ul>
 *   <li>an integral value with absolute value below 1e15 as an integer:
 *       {@code 1}, {@code -3}, {@code 1000000} ({@code -0.0} is {@code 0});
 *   <li>else, when {@code 1e-6 <= |v| < 1e21}, its shortest round-trip
 *       digits in plain notation: {@code 12.5}, {@code 0.000025},
 *       {@code 100000000000000000000};
 *   <li>else its shortest round-trip digits in exponent form, with a sign
 *       and at least two exponent digits: {@code 1e+21}, {@code 1.5e-07},
 *       {@code 5e-324}.
 * </ul>
 *
 * "Shortest round-trip digits" are the fewest significant digits that
 * parse back to the same double, and of those the nearest to it.
 *
 * <h2>Design</h2>
 * {@link Double#toString(double)} cannot be used. Before JDK 19 it does
 * not always give the shortest digits (JDK-4511638: on Java 17
 * {@code Double.toString(2e23)} is {@code 1.9999999999999998E23} and
 * {@code Double.toString(1e23)} is {@code 9.999999999999999E22}), and it
 * switches to {@code E} notation below 1e-3 and from 1e7. Nor can
 * {@code new BigDecimal(Double.toString(v))}, which keeps those extra
 * digits ({@code 199999999999999980000000}). Instead the
 * exact binary value is rounded with {@link BigDecimal} to p significant
 * digits, binary-searching the smallest p in [1, 17] that parses back to
 * the same double. That costs one to three microseconds, so the usual
 * values take a fast path first ({@link #shortPlain}: exact double
 * arithmetic, well under 100 ns, for magnitudes in [1e-6, 1e15) with one
 * shortest candidate) and integral values below 1e15, most counters, take
 * {@link Long#toString(long)}. All of it runs on the flusher thread, never
 * on the emitting caller's.
 */
final class ValueText {
    private ValueText() {}

    /** Integral values below this magnitude are written as integers (SPEC.md). */
    static final double INTEGER_LIMIT = 1e15;

    /** The largest significant-digit count a double ever needs to round-trip. */
    private static final int MAX_DIGITS = 17;

    private static final MathContext[] NEAREST = contexts(RoundingMode.HALF_EVEN);
    private static final MathContext[] DOWN = contexts(RoundingMode.FLOOR);
    private static final MathContext[] UP = contexts(RoundingMode.CEILING);

    private static MathContext[] contexts(RoundingMode mode) {
        MathContext[] m = new MathContext[MAX_DIGITS + 1];
        for (int p = 1; p <= MAX_DIGITS; p++) {
            m[p] = new MathContext(p, mode);
        }
        return m;
    }

    /**
     * The VALUE text of {@code v}.
     *
     * @throws IllegalArgumentException if {@code v} is NaN or infinite
     */
    static String format(double v) {
        if (!Double.isFinite(v)) {
            throw new IllegalArgumentException(v + " cannot be sent; only finite numbers can");
        }
        if (Math.abs(v) < INTEGER_LIMIT && v == Math.rint(v)) {
            return Long.toString((long) v);
        }
        String fast = shortPlain(v);
        return fast != null ? fast : render(v, shortest(v));
    }

    /** Below this, every integer is exact as a double, and so are its neighbours. */
    private static final double EXACT_INTEGERS = 0x1p53 - 4;

    /**
     * The fast path of {@link #format}, for the values metrics mostly carry:
     * a magnitude in [1e-6, 1e15) with a short decimal form, like
     * {@code 12.5} or {@code 0.000105}. Returns null when it cannot be sure,
     * and the exact {@link BigDecimal} path decides.
     *
     * <p>For k = 1, 2, ... it tests the k-fraction-digit decimals m/10^k
     * next to |v|. Each test is exact: m and 10^k are exact doubles, so
     * {@code m / 10^k} is the double nearest that decimal, and the decimal
     * round-trips iff that is v. Four m around the rounded product cover
     * both true neighbours despite the product's rounding error; any other
     * decimal of k digits is farther from v than one of them on its side,
     * and the round-trip interval is convex. So the first k with a hit is
     * the shortest form. With exactly one hit it is the answer; with two or
     * more, choosing the nearest needs exact arithmetic, so we give up.
     */
    static String shortPlain(double v) {
        double a = Math.abs(v);
        if (!(a >= PLAIN_MIN && a < INTEGER_LIMIT)) {
            return null;
        }
        for (int k = 1; k < POW10.length; k++) {
            double scale = POW10[k];
            double p = a * scale;
            if (p >= EXACT_INTEGERS) {
                return null;
            }
            double first = Math.floor(p) - 1;
            double hit = 0;
            int hits = 0;
            for (double m = Math.max(1, first); m <= first + 3; m++) {
                if (m / scale == a) {
                    hit = m;
                    hits++;
                }
            }
            if (hits == 1) {
                return plain(v < 0, (long) hit, k);
            }
            if (hits > 1) {
                return null;
            }
        }
        return null;
    }

    /** {@code m / 10^k} in plain notation; m has no trailing zero (k is minimal). */
    private static String plain(boolean negative, long m, int k) {
        String digits = Long.toString(m);
        int n = digits.length();
        StringBuilder sb = new StringBuilder(n + k + 3);
        if (negative) {
            sb.append('-');
        }
        if (n <= k) {
            sb.append("0.");
            for (int i = n; i < k; i++) {
                sb.append('0');
            }
            sb.append(digits);
        } else {
            sb.append(digits, 0, n - k).append('.').append(digits, n - k, n);
        }
        return sb.toString();
    }

    /** The shortest decimal that parses back to {@code v}, nearest to it among equals. */
    static BigDecimal shortest(double v) {
        BigDecimal exact = new BigDecimal(v);
        // Round-tripping is monotonic in p (a p-digit decimal is also a
        // (p+1)-digit one), so the smallest p can be binary-searched.
        int lo = 1;
        int hi = MAX_DIGITS;
        BigDecimal best = roundTripping(exact, v, MAX_DIGITS);
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            BigDecimal c = roundTripping(exact, v, mid);
            if (c != null) {
                hi = mid;
                best = c;
            } else {
                lo = mid + 1;
            }
        }
        return best.stripTrailingZeros();
    }

    /**
     * A {@code p}-digit decimal that parses back to {@code v}, or null. The
     * nearest one is tried first; the other neighbour too, because just
     * above a power of two the round-trip interval is lopsided and the
     * farther neighbour can be inside it when the nearer is not.
     */
    private static BigDecimal roundTripping(BigDecimal exact, double v, int p) {
        BigDecimal nearest = exact.round(NEAREST[p]);
        if (toDouble(nearest) == v) {
            return nearest;
        }
        BigDecimal down = exact.round(DOWN[p]);
        BigDecimal other = down.compareTo(nearest) == 0 ? exact.round(UP[p]) : down;
        return toDouble(other) == v ? other : null;
    }

    /** Powers of ten that are exact doubles. */
    private static final double[] POW10 = {
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22
    };

    /**
     * The double nearest to {@code d}, as {@link BigDecimal#doubleValue()}
     * but without its detour through a string in the common case: when the
     * digits and the power of ten are both exact doubles, one IEEE division
     * or multiplication is correctly rounded, which is the same answer.
     */
    static double toDouble(BigDecimal d) {
        int scale = d.scale();
        if (d.precision() <= 15 && scale >= -22 && scale <= 22) {
            // At most 15 digits: the unscaled value is below 2^53, exact as a double.
            double u = d.unscaledValue().longValue();
            return scale >= 0 ? u / POW10[scale] : u * POW10[-scale];
        }
        return d.doubleValue();
    }

    /** Where plain notation ends and exponent form begins (SPEC.md). */
    private static final double PLAIN_MIN = 1e-6;
    private static final double PLAIN_LIMIT = 1e21;

    /** {@code d}, the shortest digits of {@code v}, in the notation SPEC.md gives {@code v}. */
    static String render(double v, BigDecimal d) {
        double a = Math.abs(v);
        if (a >= PLAIN_MIN && a < PLAIN_LIMIT) {
            return d.toPlainString();
        }
        // d = unscaled * 10^-scale, so its leading digit has exponent e.
        String digits = d.unscaledValue().abs().toString();
        int e = digits.length() - d.scale() - 1;
        StringBuilder sb = new StringBuilder(digits.length() + 8);
        if (d.signum() < 0) {
            sb.append('-');
        }
        sb.append(digits.charAt(0));
        if (digits.length() > 1) {
            sb.append('.').append(digits, 1, digits.length());
        }
        sb.append('e').append(e < 0 ? '-' : '+');
        int abs = Math.abs(e);
        if (abs < 10) {
            sb.append('0');
        }
        return sb.append(abs).toString();
    }
}
