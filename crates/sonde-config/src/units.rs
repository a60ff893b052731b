//! Values written as people write them: durations, sizes, addresses. Each
//! is checked while the file is read, so a bad one is reported at its line.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;
use sonde_runtime::addr::ListenAddr;

use crate::error::{ConfigError, Source, FIX_MARK};
use toml::Spanned;

/// Why a value does not parse, and what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitError {
    /// What is wrong.
    pub problem: String,
    /// What to write instead.
    pub fix: String,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.problem, self.fix)
    }
}

impl std::error::Error for UnitError {}

impl UnitError {
    /// As a serde error, with the fix kept apart (see
    /// [`FIX_MARK`](super::error::FIX_MARK)).
    fn into_de<E: de::Error>(self) -> E {
        E::custom(format!("{}{FIX_MARK}{}", self.problem, self.fix))
    }
}

/// A duration written as `"500ms"`, `"10s"`, `"5m"` or `"1h"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HumanDuration::parse(s).map_err(|e| e.to_string())
    }
}

impl HumanDuration {
    fn parse(s: &str) -> Result<Self, UnitError> {
        let bad = || UnitError {
            problem: format!("{s:?} is not a duration"),
            fix: "write a whole number with a unit, like \"10s\", \"500ms\", \"5m\" or \"1h\""
                .into(),
        };
        let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().map_err(|_| bad())?;
        let d = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => return Err(bad()),
        };
        Ok(HumanDuration(d))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        HumanDuration::parse(&s).map_err(UnitError::into_de)
    }
}

/// A size written as `"512KiB"`, `"8MiB"`, `"1GiB"` or a number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanSize(pub u64);

impl FromStr for HumanSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HumanSize::parse(s).map_err(|e| e.to_string())
    }
}

impl HumanSize {
    fn parse(s: &str) -> Result<Self, UnitError> {
        let bad = || UnitError {
            problem: format!("{s:?} is not a size"),
            fix: "write a whole number with a unit, like \"512KiB\", \"8MiB\" or \"1GiB\"".into(),
        };
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().map_err(|_| bad())?;
        let mult: u64 = match unit {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            _ => return Err(bad()),
        };
        n.checked_mul(mult).map(HumanSize).ok_or_else(bad)
    }
}

impl<'de> Deserialize<'de> for HumanSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        HumanSize::parse(&s).map_err(UnitError::into_de)
    }
}

/// A listen address, checked while parsing so the error points at its line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen(pub ListenAddr);

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(Listen).map_err(|e| {
            UnitError {
                problem: format!("{e}"),
                fix: "write SCHEME://ADDRESS, like \"udp://127.0.0.1:8125\" or \"unixgram:///tmp/metric.sock\"".into(),
            }
            .into_de()
        })
    }
}

/// A `HOST:PORT` socket address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostPort(pub std::net::SocketAddr);

impl FromStr for HostPort {
    type Err = UnitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use std::net::ToSocketAddrs;
        s.to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(HostPort)
            .ok_or_else(|| UnitError {
                problem: format!("{s:?} is not HOST:PORT"),
                fix: "write an address and a port, like \"127.0.0.1:8686\"".into(),
            })
    }
}

impl<'de> Deserialize<'de> for HostPort {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(UnitError::into_de)
    }
}

/// The permission bits an octal string like `"0660"` (or `"0o660"`)
/// writes, if it writes any.
pub fn parse_mode(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    u32::from_str_radix(digits, 8)
        .ok()
        .filter(|v| *v <= 0o777 && !digits.is_empty())
}

/// Parses an octal permission string like `"0660"`, or names `key`.
///
/// # Errors
///
/// When `m` is not a file mode, with the fix.
pub fn socket_mode(src: Source<'_>, m: &Spanned<String>, key: String) -> Result<u32, ConfigError> {
    let s = m.get_ref();
    match parse_mode(s) {
        Some(v) => Ok(v),
        None => Err(src.error(
            m.span(),
            key,
            format!("{s:?} is not a file mode"),
            "write octal permission bits, like \"0660\"",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units() {
        for (s, n) in [
            ("512", 512),
            ("4KiB", 4096),
            ("8MiB", 8 << 20),
            ("1GiB", 1 << 30),
        ] {
            assert_eq!(s.parse::<HumanSize>().unwrap().0, n);
        }
        for s in ["", "MiB", "1.5MiB", "8MB", "99999999999999GiB"] {
            assert!(s.parse::<HumanSize>().is_err(), "{s}");
        }
    }

    #[test]
    fn durations_take_the_usual_units() {
        for (s, d) in [
            ("500ms", 500),
            ("10s", 10_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
        ] {
            assert_eq!(
                s.parse::<HumanDuration>().unwrap().0,
                Duration::from_millis(d)
            );
        }
        for s in ["", "10", "s", "1.5s", "-1s", "10 s"] {
            assert!(s.parse::<HumanDuration>().is_err(), "{s}");
        }
    }
}
