package dev.sonde.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** VALUE text: {@code testdata/vectors/values.json} and the shortest-round-trip rule. */
class ValueTextTest {

    @Test
    void every_case_of_values_json_is_written_as_the_file_says() throws IOException {
        JsonNode file = new ObjectMapper().readTree(Repo.vectors().resolve("values.json").toFile());
        JsonNode cases = file.get("cases");
        assertTrue(cases.size() >= 10, "values.json cases");
        for (JsonNode c : cases) {
            double v = c.get(0).asDouble();
            assertEquals(c.get(1).asText(), ValueText.format(v), "value " + c.get(0));
        }
    }

    @Test
    void every_rejected_value_of_values_json_throws() throws IOException {
        JsonNode file = new ObjectMapper().readTree(Repo.vectors().resolve("values.json").toFile());
        JsonNode rejected = file.get("rejected");
        assertEquals(3, rejected.size());
        for (JsonNode r : rejected) {
            double v = Double.parseDouble(r.asText());
            assertFalse(Double.isFinite(v));
            assertThrows(IllegalArgumentException.class, () -> ValueText.format(v), r.asText());
        }
    }

    @Test
    void values_where_java_17_double_to_string_is_not_shortest_get_their_shortest_digits() {
        // On Java 17 Double.toString gives 1.9999999999999998E23 and
        // 9.999999999999999E22 for these (JDK-4511638).
        assertEquals("2e+23", ValueText.format(2e23));
        assertEquals("1e+23", ValueText.format(1e23));
        assertEquals("-2681447534367114000", ValueText.format(-2.6814475343671142E18));
    }

    @Test
    void integral_values_below_1e15_are_integers_and_larger_ones_shortest_decimals() {
        assertEquals("999999999999999", ValueText.format(999_999_999_999_999d));
        assertEquals("-999999999999999", ValueText.format(-999_999_999_999_999d));
        assertEquals("1000000000000000", ValueText.format(1e15));
        assertEquals("1000000000000000.5", ValueText.format(1e15 + 0.5));
        assertEquals("123456789012345680", ValueText.format(123456789012345678d));
        assertEquals("0", ValueText.format(-0.0));
    }

    @Test
    void plain_notation_from_1e_minus_6_up_to_1e21_and_exponent_form_outside() {
        assertEquals("0.000001", ValueText.format(1e-6));
        assertEquals("-0.0000012345678901234567", ValueText.format(-1.2345678901234567e-6));
        assertEquals("1e-07", ValueText.format(1e-7));
        assertEquals("9.999999999999997e-07", ValueText.format(Math.nextDown(1e-6)));
        assertEquals("1.25e-07", ValueText.format(1.25e-7));
        assertEquals("100000000000000000000", ValueText.format(1e20));
        assertEquals("999999999999999900000", ValueText.format(Math.nextDown(1e21)));
        assertEquals("1e+21", ValueText.format(1e21));
        assertEquals("-1.5e+300", ValueText.format(-1.5e300));
        assertEquals("5e-324", ValueText.format(Double.MIN_VALUE));
        assertEquals("1.7976931348623157e+308", ValueText.format(Double.MAX_VALUE));
    }

    @Test
    void no_value_text_is_longer_than_25_bytes() {
        SplittableRandom rnd = new SplittableRandom(3);
        for (int i = 0; i < 20_000; i++) {
            double v = Double.longBitsToDouble(rnd.nextLong());
            if (Double.isFinite(v)) {
                String text = ValueText.format(v);
                assertTrue(text.length() <= 25, text);
            }
        }
        assertEquals(25, ValueText.format(-1.2345678901234567e-6).length());
    }

    @Test
    void random_doubles_round_trip_with_no_shorter_text_possible() {
        SplittableRandom rnd = new SplittableRandom(7);
        int checked = 0;
        while (checked < 20_000) {
            // Half across every exponent, half in the range metrics usually live in.
            double v = checked % 2 == 0
                    ? Double.longBitsToDouble(rnd.nextLong())
                    : (rnd.nextDouble() - 0.5) * Math.pow(10, rnd.nextInt(-4, 10));
            if (!Double.isFinite(v)) {
                continue;
            }
            checked++;
            String text = ValueText.format(v);
            assertEquals(v, Double.parseDouble(text), text);
            BigDecimal d = new BigDecimal(text);
            int digits = d.stripTrailingZeros().precision();
            if (digits > 1 && !(Math.abs(v) < 1e15 && v == Math.rint(v))) {
                assertFalse(anyRoundTrips(v, digits - 1), "shorter than " + text + " exists for " + v);
            }
        }
    }

    @Test
    void the_fast_path_agrees_with_the_exact_path_wherever_it_answers() {
        SplittableRandom rnd = new SplittableRandom(11);
        int answered = 0;
        int total = 60_000;
        for (int i = 0; i < total; i++) {
            double v;
            switch (i % 3) {
                case 0:
                    // Short decimals, as people type them: 12.5, 0.000105, -3.25.
                    v = rnd.nextLong(1, 10_000_000) / Math.pow(10, rnd.nextInt(1, 12));
                    break;
                case 1:
                    // A timer in milliseconds from System.nanoTime().
                    v = rnd.nextLong(1, 5_000_000_000L) / 1e6;
                    break;
                default:
                    // Anything in the fast path's range, mostly 17 digits long.
                    v = Math.pow(10, rnd.nextDouble(-6, 15)) * (rnd.nextBoolean() ? 1 : -1);
                    break;
            }
            if (v == Math.rint(v)) {
                continue;
            }
            String fast = ValueText.shortPlain(v);
            if (fast != null) {
                answered++;
                assertEquals(ValueText.render(v, ValueText.shortest(v)), fast, "value " + v);
            }
        }
        assertTrue(answered > total / 2, "the fast path answered only " + answered + " of " + total);
    }

    /** Brute force: does any decimal with {@code p} significant digits parse back to {@code v}? */
    private static boolean anyRoundTrips(double v, int p) {
        BigDecimal exact = new BigDecimal(v);
        for (RoundingMode m : new RoundingMode[] {RoundingMode.FLOOR, RoundingMode.CEILING}) {
            if (exact.round(new MathContext(p, m)).doubleValue() == v) {
                return true;
            }
        }
        return false;
    }
}
