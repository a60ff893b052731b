//! The message encoding of `sdk/SPEC.md`: six smallest-form msgpack strs in
//! a fixarray, and array16 bunches of them.
//!
//! Hand-written rather than with `rmp` because it is four byte layouts and
//! the crate stays dependency-light for services that embed it.

/// The seven metric types of the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// Reported as a running total.
    Counter,
    /// Reported as sum per second of the window.
    RateCounter,
    /// A running total and a per-second rate.
    Meter,
    /// A distribution: min, max, avg, sum, count, percentiles.
    Timer,
    /// The last value of the window.
    Store,
    /// The last value per client timestamp.
    TsStore,
    /// Counts per agent-side bucket.
    Histogram,
}

impl Type {
    /// The wire name (`counter`, `rate_counter`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::RateCounter => "rate_counter",
            Type::Meter => "meter",
            Type::Timer => "timer",
            Type::Store => "store",
            Type::TsStore => "ts_store",
            Type::Histogram => "histogram",
        }
    }

    /// Counters and rate counters are summed per series before sending.
    pub fn sums(self) -> bool {
        matches!(self, Type::Counter | Type::RateCounter)
    }
}

/// Appends `s` as the smallest msgpack str.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let n = s.len();
    if n <= 31 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

/// Appends one `["emit", TYPE, NAME, VALUE, TAGS, TS]` message.
pub fn write_message(out: &mut Vec<u8>, ty: &str, name: &str, value: &str, tags: &str, ts: &str) {
    out.push(0x96);
    for f in ["emit", ty, name, value, tags, ts] {
        write_str(out, f);
    }
}

/// Wraps encoded messages: one stays bare, more become an array16 bunch.
pub fn datagram(messages: &[u8], count: usize) -> Vec<u8> {
    if count == 1 {
        return messages.to_vec();
    }
    let mut out = Vec::with_capacity(messages.len() + 3);
    out.push(0xdc);
    out.extend_from_slice(&(count as u16).to_be_bytes());
    out.extend_from_slice(messages);
    out
}

/// The VALUE text (`sdk/SPEC.md`): integers below 1e15 without a
/// fraction; plain shortest digits for `1e-6 <= |v| < 1e21`; else shortest
/// digits as `d.ddde±XX`. `None` for NaN and infinities.
pub fn value_text(v: f64) -> Option<String> {
    if !v.is_finite() {
        return None;
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return Some(format!("{}", v as i64));
    }
    let a = v.abs();
    if (1e-6..1e21).contains(&a) {
        return Some(format!("{v}"));
    }
    // Rust writes `1.5e-7`; the contract wants `1.5e-07` (C, Go, Python).
    let s = format!("{v:e}");
    let (mantissa, exp) = s.split_once('e')?;
    let (sign, digits) = match exp.strip_prefix('-') {
        Some(d) => ('-', d),
        None => ('+', exp),
    };
    Some(format!("{mantissa}e{sign}{digits:0>2}"))
}
