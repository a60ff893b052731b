//! Number parsing straight from wire bytes.
//!
//! Both protocols carry numbers as ASCII text inside a larger buffer, so
//! these functions take `&[u8]` rather than `&str`: going through `str`
//! would cost a UTF-8 check per value for no gain, since any byte outside
//! the number grammar is rejected anyway.

/// Parses a decimal or scientific number (`1`, `0.25`, `-3e2`, `+5`).
///
/// The whole input must be the number: no surrounding spaces, no trailing
/// bytes. Returns `None` for empty input, garbage, `nan`, `inf` and for text
/// whose value overflows to infinity (`1e400`), because every consumer of a
/// metric value needs a finite number.
///
/// # Design
///
/// `fast-float2` is an Eisel-Lemire parser: correctly rounded like
/// `str::parse::<f64>`, without the UTF-8 check and several times faster on
/// short inputs, which is all metric values ever are.
///
/// Short plain decimals (`12`, `-0.25`: at most 15 digits, no exponent),
/// which is nearly every metric value, skip it for a loop of their own: a
/// digit at a time into an integer and at most one division, a fraction
/// of the instructions of the general algorithm (`number/parse_f64` is not
/// benched on its own; the counts are from `scripts/callgrind-hot-path.sh`,
/// see "StatsD parsing on the structural index" in `docs/benchmarks/LOG.md`).
#[inline]
pub fn parse_f64(text: &[u8]) -> Option<f64> {
    if let Some(v) = short_decimal(text) {
        return Some(v);
    }
    // fast-float2 also accepts `inf`, `nan` and `infinity`; the finiteness
    // check below rejects those and overflows in one test.
    match fast_float2::parse::<f64, _>(text) {
        Ok(v) if v.is_finite() => Some(v),
        _ => None,
    }
}

/// `[+-]?[0-9]+(\.[0-9]+)?` with at most 15 digits in all, else `None`
/// (the caller then asks fast-float2, which also rejects what is not a
/// number).
///
/// Exact: the digits make an integer below 10^15 < 2^53, so it converts to
/// `f64` exactly, as does 10^k for k <= 15; one IEEE division of two exact
/// values is correctly rounded, so the result is the correctly rounded
/// value of the text, the same as fast-float2's (Clinger's fast path).
#[inline(always)]
fn short_decimal(text: &[u8]) -> Option<f64> {
    const POW10: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    let (negative, body) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if body.is_empty() || body.len() > 16 {
        return None;
    }
    let mut mantissa: u64 = 0;
    // Position of the `.`; `body.len()` while none was seen.
    let mut dot = body.len();
    for (i, &byte) in body.iter().enumerate() {
        let digit = byte.wrapping_sub(b'0');
        if digit <= 9 {
            mantissa = mantissa * 10 + u64::from(digit);
        } else if byte == b'.' && dot == body.len() && i > 0 && i + 1 < body.len() {
            dot = i;
        } else {
            return None;
        }
    }
    let fraction_digits = body.len().saturating_sub(dot + 1);
    if body.len() - usize::from(dot < body.len()) > 15 {
        return None;
    }
    // At most 15 digits, so the mantissa fits `i64`: x86-64's baseline
    // converts that in one instruction, a `u64` in several. Whole numbers,
    // the usual value, skip the division ("the parser timed alone; values
    // without a division" in `docs/benchmarks/LOG.md`).
    let whole = mantissa as i64 as f64;
    let magnitude = if fraction_digits == 0 {
        whole
    } else {
        whole / POW10[fraction_digits]
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// Parses a signed decimal integer (`1763800200`, `-5`, `+5`), as used for
/// unix timestamps.
///
/// Only an optional sign followed by one or more ASCII digits is accepted;
/// anything else, including a value outside `i64`, is `None`.
#[inline]
pub fn parse_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    // Accumulate the magnitude in u64 so that i64::MIN, whose magnitude does
    // not fit in i64, still parses.
    let mut magnitude: u64 = 0;
    for &byte in digits {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn f64_accepts_decimal_scientific_and_signed_text() {
        assert_eq!(parse_f64(b"1"), Some(1.0));
        assert_eq!(parse_f64(b"0.25"), Some(0.25));
        assert_eq!(parse_f64(b"-3e2"), Some(-300.0));
        assert_eq!(parse_f64(b"+5"), Some(5.0));
        assert_eq!(parse_f64(b"1E-3"), Some(0.001));
        assert_eq!(parse_f64(b".5"), Some(0.5));
        assert_eq!(parse_f64(b"-0"), Some(-0.0));
    }

    #[test]
    fn short_decimals_take_the_fast_path_and_round_like_fast_float() {
        for (text, want) in [
            (&b"0"[..], 0.0f64),
            (b"-0", -0.0),
            (b"123", 123.0),
            (b"+4", 4.0),
            (b"-12.5", -12.5),
            (b"0.1", 0.1),
            (b"999999999999999", 999_999_999_999_999.0),
            (b"0.00000000000001", 1e-14),
            (b"1.23456789012345", 1.234_567_890_123_45),
        ] {
            let got = short_decimal(text);
            assert_eq!(
                got.map(f64::to_bits),
                Some(want.to_bits()),
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
        // Left to fast-float2: exponents, bare dots, 16 digits or more.
        for text in [
            &b"1e3"[..],
            b".5",
            b"5.",
            b"1234567890123456",
            b"0.0000000000000001",
            b"1..2",
            b"",
        ] {
            assert_eq!(
                short_decimal(text),
                None,
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn f64_rejects_empty_garbage_and_partial_input() {
        for text in [
            &b""[..],
            b"+",
            b"-",
            b".",
            b"abc",
            b"1x",
            b" 1",
            b"1 ",
            b"1,5",
            b"0x10",
            b"1e",
            b"--1",
            b"1.2.3",
        ] {
            assert_eq!(parse_f64(text), None, "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn f64_rejects_nan_infinity_and_overflow() {
        for text in [
            &b"nan"[..],
            b"NaN",
            b"inf",
            b"-inf",
            b"infinity",
            b"Infinity",
            b"1e400",
            b"-1e400",
        ] {
            assert_eq!(parse_f64(text), None, "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn i64_accepts_signed_digits_up_to_both_limits() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"1763800200"), Some(1_763_800_200));
        assert_eq!(parse_i64(b"+5"), Some(5));
        assert_eq!(parse_i64(b"-5"), Some(-5));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"007"), Some(7));
    }

    #[test]
    fn i64_rejects_overflow_signs_alone_and_non_digits() {
        for text in [
            &b""[..],
            b"-",
            b"+",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999999",
            b"1.0",
            b"1e3",
            b" 1",
            b"1 ",
            b"--1",
            b"12a",
            b"/",
            b":",
        ] {
            assert_eq!(parse_i64(text), None, "{:?}", String::from_utf8_lossy(text));
        }
    }

    proptest! {
        #[test]
        fn i64_agrees_with_std_on_arbitrary_text(text in "[-+]?[0-9]{0,21}|\\PC{0,8}") {
            prop_assert_eq!(parse_i64(text.as_bytes()), text.parse::<i64>().ok());
        }

        #[test]
        fn f64_round_trips_every_finite_value(v in any::<f64>().prop_filter("finite", |v| v.is_finite())) {
            prop_assert_eq!(parse_f64(v.to_string().as_bytes()), Some(v));
            prop_assert_eq!(parse_f64(format!("{v:e}").as_bytes()), Some(v));
        }

        #[test]
        fn short_decimals_agree_with_fast_float_to_the_bit(
            text in "[-+]?[0-9]{0,17}(\\.[0-9]{0,17})?|[-+.0-9]{0,6}",
        ) {
            let fast = short_decimal(text.as_bytes());
            let full = fast_float2::parse::<f64, _>(text.as_bytes()).ok();
            if let Some(v) = fast {
                prop_assert_eq!(Some(v.to_bits()), full.map(f64::to_bits), "{}", text);
            }
            prop_assert_eq!(parse_f64(text.as_bytes()).map(f64::to_bits), full.filter(|v| v.is_finite()).map(f64::to_bits));
        }

        #[test]
        fn f64_never_returns_a_non_finite_value(text in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Some(v) = parse_f64(&text) {
                prop_assert!(v.is_finite());
            }
        }
    }
}
