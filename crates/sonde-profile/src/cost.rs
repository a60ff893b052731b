//! CPU time in the terms people act on: what it costs and what it emits,
//! over the profiled period and extrapolated to a year.
//!
//! Every figure derives from sample counts, the sampling frequency and the
//! period (docs/PROFILING.md, "What a function costs"):
//!
//! ```text
//! cpu_s         = samples / frequency              (CPU-seconds in the period)
//! core_hours    = cpu_s / 3600
//! cost          = core_hours × core_cost_per_hour
//! co2_kg        = core_hours × co2_grams_per_core_hour / 1000
//! per year      = per period × 31,557,600 / period_s   (365.25 days)
//! ```
//!
//! A function seen in `n` samples has a relative sampling error of about
//! `1/√n` (100 samples: ±10%, 10,000: ±1%), which every figure inherits.

use std::fmt;
use std::str::FromStr;

/// Seconds in a year of 365.25 days.
pub const SECONDS_PER_YEAR: f64 = 365.25 * 86_400.0;

/// A price for one core for one hour, in a currency.
#[derive(Debug, Clone, PartialEq)]
pub struct Price {
    /// The amount, at least 0.
    pub amount: f64,
    /// An ISO 4217 code such as `USD` or `EUR`.
    pub currency: String,
}

impl FromStr for Price {
    type Err = String;

    /// `"0.048 USD"`: an amount, a space, and a currency code of three
    /// capital letters.
    fn from_str(s: &str) -> Result<Price, String> {
        let bad =
            || format!("{s:?} is not a price like \"0.048 USD\" (an amount and a currency code)");
        let (amount, currency) = s.trim().split_once(' ').ok_or_else(bad)?;
        let amount: f64 = amount.parse().map_err(|_| bad())?;
        let currency = currency.trim();
        if !amount.is_finite()
            || amount < 0.0
            || currency.len() != 3
            || !currency.bytes().all(|b| b.is_ascii_uppercase())
        {
            return Err(bad());
        }
        Ok(Price {
            amount,
            currency: currency.to_string(),
        })
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.amount, self.currency)
    }
}

/// What a core-hour costs and emits; either may be unset, and an unset
/// one adds no figure anywhere.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prices {
    /// `[profiler] core_cost_per_hour`.
    pub core_cost_per_hour: Option<Price>,
    /// `[profiler] co2_grams_per_core_hour`: grams of CO2-equivalent.
    pub co2_grams_per_core_hour: Option<f64>,
}

impl Prices {
    /// True when neither price is set.
    pub fn is_empty(&self) -> bool {
        self.core_cost_per_hour.is_none() && self.co2_grams_per_core_hour.is_none()
    }

    /// What `cpu_s` CPU-seconds cost, in the price's currency.
    pub fn cost(&self, cpu_s: f64) -> Option<f64> {
        self.core_cost_per_hour
            .as_ref()
            .map(|p| cpu_s / 3600.0 * p.amount)
    }

    /// Kilograms of CO2-equivalent that `cpu_s` CPU-seconds emit.
    pub fn co2_kg(&self, cpu_s: f64) -> Option<f64> {
        self.co2_grams_per_core_hour
            .map(|g| cpu_s / 3600.0 * g / 1000.0)
    }
}

/// What a figure over a period of `period_s` seconds comes to in a year
/// at the same rate (0 for an empty period).
pub fn per_year(figure: f64, period_s: f64) -> f64 {
    if period_s > 0.0 {
        figure * SECONDS_PER_YEAR / period_s
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_parse_with_their_currency_and_bad_ones_say_how_to_write_one() {
        assert_eq!(
            "0.048 USD".parse(),
            Ok(Price {
                amount: 0.048,
                currency: "USD".into()
            })
        );
        for bad in [
            "0.048",
            "USD",
            "0.048 usd",
            "-1 EUR",
            "NaN EUR",
            "1 EURO",
            "",
        ] {
            let e = bad.parse::<Price>().unwrap_err();
            assert!(e.contains("0.048 USD"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_hour_of_one_core_costs_the_price_and_a_year_of_it_8766_times_that() {
        let prices = Prices {
            core_cost_per_hour: Some("0.05 USD".parse().unwrap()),
            co2_grams_per_core_hour: Some(20.0),
        };
        assert!((prices.cost(3600.0).unwrap() - 0.05).abs() < 1e-12);
        assert!((prices.co2_kg(3600.0).unwrap() - 0.02).abs() < 1e-12);
        // One core busy all period, whatever the period: 8766 core-hours a year.
        let period_s = 600.0;
        let year = per_year(prices.cost(period_s).unwrap(), period_s);
        assert!((year - 8766.0 * 0.05).abs() < 1e-9, "{year}");
        assert_eq!(per_year(1.0, 0.0), 0.0);
        assert!(Prices::default().is_empty());
        assert_eq!(Prices::default().cost(10.0), None);
    }
}
