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
#[inline]
pub fn parse_f64(text: &[u8]) -> Option<f64> {
    // fast-float2 also accepts `inf`, `nan` and `infinity`; the finiteness
    // check below rejects those and overflows in one test.
    match fast_float2::parse::<f64, _>(text) {
        Ok(v) if v.is_finite() => Some(v),
        _ => None,
    }
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
        fn f64_never_returns_a_non_finite_value(text in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Some(v) = parse_f64(&text) {
                prop_assert!(v.is_finite());
            }
        }
    }
}
