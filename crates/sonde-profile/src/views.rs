//! The text views of a profile: top functions by self and total, the
//! difference between two profiles, and folded stacks.
//!
//! Shares follow the contract in ARCHITECTURE.md ("Profiles: contract"):
//! a function's `self` is the fraction of samples in which it is the leaf
//! frame, its `total` the fraction in which it is on the stack at all
//! (counted once per sample however often it recurses), both over the
//! samples of the profile, which never holds idle samples.

use hashbrown::{HashMap, HashSet};
use serde::Serialize;

use crate::cost::{per_year, Prices, SECONDS_PER_YEAR};
use crate::model::{Function, HostSamples, Profile};

/// One function's row of the top table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The function's name.
    pub function: String,
    /// The module it lives in.
    pub module: String,
    /// Fraction of samples with the function as the leaf.
    #[serde(rename = "self")]
    pub self_share: f64,
    /// Fraction of samples with the function anywhere on the stack.
    pub total: f64,
    /// Samples with the function as the leaf.
    pub self_samples: u64,
    /// Samples with the function on the stack.
    pub total_samples: u64,
    /// CPU-seconds with the function as the leaf: its samples over the
    /// sampling frequency (each sample stands for a CPU busy for one
    /// sampling interval).
    pub self_cpu_s: f64,
    /// CPU-seconds with the function on the stack.
    pub total_cpu_s: f64,
    /// Cost and CO2, where prices are set ([`price_top`]).
    #[serde(flatten)]
    pub costs: Costs,
}

/// A row's cost and CO2 for the period and per year at its rate, self and
/// total (see [`crate::cost`] for the formula); each absent without its
/// price.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Costs {
    /// Cost of the self CPU time over the period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub self_cost: Option<f64>,
    /// Cost of the total CPU time over the period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_cost: Option<f64>,
    /// Self cost extrapolated to a year.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub self_cost_per_year: Option<f64>,
    /// Total cost extrapolated to a year.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_cost_per_year: Option<f64>,
    /// Kilograms of CO2e of the self CPU time over the period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub self_co2_kg: Option<f64>,
    /// Kilograms of CO2e of the total CPU time over the period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_co2_kg: Option<f64>,
    /// Self CO2 extrapolated to a year, kilograms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub self_co2_kg_per_year: Option<f64>,
    /// Total CO2 extrapolated to a year, kilograms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_co2_kg_per_year: Option<f64>,
}

/// The top table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Top {
    /// Samples in the profile.
    pub samples: u64,
    /// The period's length in seconds.
    pub duration_s: f64,
    /// The currency of the costs, where `core_cost_per_hour` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// The hosts the samples were taken on, with each one's samples.
    pub hosts: Vec<HostSamples>,
    /// Functions by `self` descending, then `total`, then name.
    pub functions: Vec<Row>,
}

/// Adds each row's cost and CO2, for the period and per year, where
/// `prices` sets them.
pub fn price_top(top: &mut Top, prices: &Prices) {
    top.currency = prices
        .core_cost_per_hour
        .as_ref()
        .map(|p| p.currency.clone());
    let period = top.duration_s;
    for r in &mut top.functions {
        let (s, t) = (r.self_cpu_s, r.total_cpu_s);
        r.costs = Costs {
            self_cost: prices.cost(s),
            total_cost: prices.cost(t),
            self_cost_per_year: prices.cost(s).map(|c| per_year(c, period)),
            total_cost_per_year: prices.cost(t).map(|c| per_year(c, period)),
            self_co2_kg: prices.co2_kg(s),
            total_co2_kg: prices.co2_kg(t),
            self_co2_kg_per_year: prices.co2_kg(s).map(|c| per_year(c, period)),
            total_co2_kg_per_year: prices.co2_kg(t).map(|c| per_year(c, period)),
        };
    }
}

/// Self and total sample counts per (function, module).
fn counts(profile: &Profile) -> HashMap<&Function, (u64, u64)> {
    let mut out: HashMap<&Function, (u64, u64)> = HashMap::new();
    let mut seen: HashSet<u32> = HashSet::new();
    for stack in &profile.stacks {
        seen.clear();
        for &f in &stack.frames {
            if seen.insert(f) {
                out.entry(profile.function(f)).or_default().1 += stack.count;
            }
        }
        if let Some(&leaf) = stack.frames.last() {
            out.entry(profile.function(leaf)).or_default().0 += stack.count;
        }
    }
    out
}

fn share(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 / of as f64
    }
}

/// The `n` functions with the most self samples (all with `None`).
pub fn top(profile: &Profile, n: Option<usize>) -> Top {
    let samples = profile.samples();
    let per_sample = profile.seconds_per_sample();
    let mut functions: Vec<Row> = counts(profile)
        .into_iter()
        .map(|(f, (s, t))| Row {
            function: f.name.clone(),
            module: f.module.clone(),
            self_share: share(s, samples),
            total: share(t, samples),
            self_samples: s,
            total_samples: t,
            self_cpu_s: s as f64 * per_sample,
            total_cpu_s: t as f64 * per_sample,
            costs: Costs::default(),
        })
        .collect();
    functions.sort_by(|a, b| {
        (b.self_samples, b.total_samples)
            .cmp(&(a.self_samples, a.total_samples))
            .then_with(|| (&a.function, &a.module).cmp(&(&b.function, &b.module)))
    });
    if let Some(n) = n {
        functions.truncate(n);
    }
    Top {
        samples,
        duration_s: profile.duration_ns as f64 / 1e9,
        currency: None,
        hosts: profile.hosts(),
        functions,
    }
}

/// One function's row of a difference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffRow {
    /// The function's name.
    pub function: String,
    /// The module it lives in.
    pub module: String,
    /// Its self share in the base profile.
    pub self_base: f64,
    /// Its self share in the new profile.
    pub self_new: f64,
    /// `self_new - self_base`.
    pub delta: f64,
    /// Its total share in the base profile.
    pub total_base: f64,
    /// Its total share in the new profile.
    pub total_new: f64,
    /// Its self CPU-seconds in the base profile.
    pub self_cpu_s_base: f64,
    /// Its self CPU-seconds in the new profile.
    pub self_cpu_s_new: f64,
    /// How much its self cost a year changed, at each profile's rate
    /// ([`price_diff`]; absent without `core_cost_per_hour`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta_cost_per_year: Option<f64>,
    /// How much its self CO2 a year changed, kilograms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta_co2_kg_per_year: Option<f64>,
}

/// The difference between two profiles.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    /// Samples in the base profile.
    pub samples_base: u64,
    /// Samples in the new profile.
    pub samples: u64,
    /// The new period's length in seconds.
    pub duration_s: f64,
    /// The base period's length in seconds.
    pub duration_base_s: f64,
    /// The currency of the costs, where `core_cost_per_hour` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// The hosts of the base profile's samples, with each one's samples.
    pub hosts_base: Vec<HostSamples>,
    /// The hosts of the new profile's samples.
    pub hosts: Vec<HostSamples>,
    /// Functions by `|delta|` descending.
    pub functions: Vec<DiffRow>,
}

/// Adds each row's change in self cost and CO2 a year, where `prices`
/// sets them: the self CPU time per second of each period, times a year.
pub fn price_diff(diff: &mut Diff, prices: &Prices) {
    diff.currency = prices
        .core_cost_per_hour
        .as_ref()
        .map(|p| p.currency.clone());
    let rate = |cpu_s: f64, period_s: f64| {
        if period_s > 0.0 {
            cpu_s / period_s
        } else {
            0.0
        }
    };
    for r in &mut diff.functions {
        let year_cpu_s = (rate(r.self_cpu_s_new, diff.duration_s)
            - rate(r.self_cpu_s_base, diff.duration_base_s))
            * SECONDS_PER_YEAR;
        r.delta_cost_per_year = prices.cost(year_cpu_s);
        r.delta_co2_kg_per_year = prices.co2_kg(year_cpu_s);
    }
}

/// How each function's share changed from `base` to `new`, the `n`
/// largest changes (all with `None`).
pub fn diff(base: &Profile, new: &Profile, n: Option<usize>) -> Diff {
    diff_tops(&top(base, None), &top(new, None), n)
}

/// [`diff`] of two whole top tables (every function, as [`top`] with
/// `None` gives them, or as a store computes them).
pub fn diff_tops(base: &Top, new: &Top, n: Option<usize>) -> Diff {
    let (nb, nn) = (base.samples, new.samples);
    let by_function = |t: &'_ Top| -> HashMap<(String, String), Row> {
        t.functions
            .iter()
            .map(|r| ((r.function.clone(), r.module.clone()), r.clone()))
            .collect()
    };
    let (cb, cn) = (by_function(base), by_function(new));
    let keys: HashSet<&(String, String)> = cb.keys().chain(cn.keys()).collect();
    let mut functions: Vec<DiffRow> = keys
        .into_iter()
        .map(|key| {
            let (b, n) = (cb.get(key), cn.get(key));
            let get = |r: Option<&Row>, f: fn(&Row) -> u64| r.map_or(0, f);
            let cpu = |r: Option<&Row>| r.map_or(0.0, |r| r.self_cpu_s);
            let (sb, tb) = (get(b, |r| r.self_samples), get(b, |r| r.total_samples));
            let (sn, tn) = (get(n, |r| r.self_samples), get(n, |r| r.total_samples));
            let (self_base, self_new) = (share(sb, nb), share(sn, nn));
            DiffRow {
                function: key.0.clone(),
                module: key.1.clone(),
                self_base,
                self_new,
                delta: self_new - self_base,
                total_base: share(tb, nb),
                total_new: share(tn, nn),
                self_cpu_s_base: cpu(b),
                self_cpu_s_new: cpu(n),
                delta_cost_per_year: None,
                delta_co2_kg_per_year: None,
            }
        })
        .collect();
    functions.sort_by(|a, b| {
        b.delta
            .abs()
            .total_cmp(&a.delta.abs())
            .then_with(|| (&a.function, &a.module).cmp(&(&b.function, &b.module)))
    });
    if let Some(n) = n {
        functions.truncate(n);
    }
    Diff {
        samples_base: nb,
        samples: nn,
        duration_s: new.duration_s,
        duration_base_s: base.duration_s,
        currency: None,
        hosts_base: base.hosts.clone(),
        hosts: new.hosts.clone(),
        functions,
    }
}

/// Folded stacks, one line per distinct stack, root first, frames joined
/// by `;`, then a space and the count: `main;work;hot 752`. Stacks equal
/// across processes are summed; lines are sorted.
pub fn folded(profile: &Profile) -> String {
    let mut lines: HashMap<String, u64> = HashMap::new();
    for stack in &profile.stacks {
        let mut line = String::new();
        for (i, &f) in stack.frames.iter().enumerate() {
            if i > 0 {
                line.push(';');
            }
            // `;` and newlines would break the format; spaces are fine
            // (the count follows the last space).
            line.extend(profile.function(f).name.chars().map(|c| match c {
                ';' => ':',
                '\n' | '\r' => ' ',
                c => c,
            }));
        }
        *lines.entry(line).or_default() += stack.count;
    }
    let mut lines: Vec<(String, u64)> = lines.into_iter().collect();
    lines.sort();
    let mut out = String::new();
    for (line, count) in lines {
        out.push_str(&line);
        out.push(' ');
        out.push_str(&count.to_string());
        out.push('\n');
    }
    out
}

/// The top table as text for a terminal, with a year's cost and CO2 of
/// each function's self time where they are priced.
pub fn top_text(top: &Top, seconds_per_sample: f64) -> String {
    let priced = |f: fn(&Costs) -> Option<f64>| top.functions.iter().any(|r| f(&r.costs).is_some());
    let (cost, co2) = (
        priced(|c| c.self_cost_per_year),
        priced(|c| c.self_co2_kg_per_year),
    );
    let currency = top.currency.as_deref().unwrap_or("");
    let on = match top.hosts.as_slice() {
        [one] if !one.host.is_empty() => format!(" on {}", one.host),
        _ => String::new(),
    };
    let mut out = format!(
        "{} samples over {:.1} s ({:.2} CPU-s){on}\n{:>7} {:>7} {:>9}",
        top.samples,
        top.duration_s,
        top.samples as f64 * seconds_per_sample,
        "self",
        "total",
        "self CPU",
    );
    if cost {
        out.push_str(&format!(" {:>13}", format!("{currency}/year")));
    }
    if co2 {
        out.push_str(&format!(" {:>11}", "CO2 kg/year"));
    }
    out.push_str("  function (module)\n");
    if top.hosts.len() > 1 {
        let mut hosts = String::new();
        for h in &top.hosts {
            hosts.push_str(&format!(
                "host {}: {} samples ({:.1}%, {:.2} CPU-s)\n",
                if h.host.is_empty() {
                    "[unknown]"
                } else {
                    &h.host
                },
                h.samples,
                share(h.samples, top.samples) * 100.0,
                h.samples as f64 * seconds_per_sample
            ));
        }
        out.insert_str(out.find('\n').map_or(0, |i| i + 1), &hosts);
    }
    for row in &top.functions {
        out.push_str(&format!(
            "{:>6.2}% {:>6.2}% {:>8.2}s",
            row.self_share * 100.0,
            row.total * 100.0,
            row.self_cpu_s,
        ));
        if cost {
            out.push_str(&format!(
                " {:>13.2}",
                row.costs.self_cost_per_year.unwrap_or(0.0)
            ));
        }
        if co2 {
            out.push_str(&format!(
                " {:>11.2}",
                row.costs.self_co2_kg_per_year.unwrap_or(0.0)
            ));
        }
        out.push_str(&format!("  {} ({})\n", row.function, row.module));
    }
    out
}

/// A difference as text for a terminal, with the change in a year's
/// cost and CO2 where they are priced.
pub fn diff_text(diff: &Diff) -> String {
    let cost = diff
        .functions
        .iter()
        .any(|r| r.delta_cost_per_year.is_some());
    let co2 = diff
        .functions
        .iter()
        .any(|r| r.delta_co2_kg_per_year.is_some());
    let currency = diff.currency.as_deref().unwrap_or("");
    let mut out = format!(
        "base {} samples, new {} samples\n{:>8} {:>7} {:>7}",
        diff.samples_base, diff.samples, "delta", "base", "new"
    );
    if cost {
        out.push_str(&format!(" {:>13}", format!("{currency}/year")));
    }
    if co2 {
        out.push_str(&format!(" {:>11}", "CO2 kg/year"));
    }
    out.push_str("  function (module)\n");
    for row in &diff.functions {
        out.push_str(&format!(
            "{:>+7.2}% {:>6.2}% {:>6.2}%",
            row.delta * 100.0,
            row.self_base * 100.0,
            row.self_new * 100.0,
        ));
        if cost {
            out.push_str(&format!(
                " {:>+13.2}",
                row.delta_cost_per_year.unwrap_or(0.0)
            ));
        }
        if co2 {
            out.push_str(&format!(
                " {:>+11.2}",
                row.delta_co2_kg_per_year.unwrap_or(0.0)
            ));
        }
        out.push_str(&format!("  {} ({})\n", row.function, row.module));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Process, ProfileBuilder};

    fn f(name: &str) -> Function {
        Function {
            name: name.into(),
            module: "/bin/demo".into(),
        }
    }

    fn profile(stacks: &[(&str, u64)]) -> Profile {
        let mut b = ProfileBuilder::new(19, 0, 10_000_000_000);
        let p = Process {
            pid: 7,
            name: "demo".into(),
            container: String::new(),
            ..Default::default()
        };
        for (s, n) in stacks {
            let frames: Vec<Function> = s.split(';').map(f).collect();
            b.add(&p, &frames, *n);
        }
        b.finish()
    }

    #[test]
    fn self_counts_the_leaf_and_total_counts_a_recursive_function_once() {
        let p = profile(&[
            ("main;work;hot", 70),
            ("main;work;cold", 20),
            ("main;rec;rec;rec", 10),
        ]);
        let t = top(&p, None);
        assert_eq!(t.samples, 100);
        let row = |name: &str| t.functions.iter().find(|r| r.function == name).unwrap();
        assert_eq!(
            (row("hot").self_samples, row("hot").total_samples),
            (70, 70)
        );
        assert_eq!(
            (row("main").self_samples, row("main").total_samples),
            (0, 100)
        );
        assert_eq!(
            (row("rec").self_samples, row("rec").total_samples),
            (10, 10)
        );
        assert!((row("work").total - 0.9).abs() < 1e-12);
        assert_eq!(t.functions[0].function, "hot");
        assert_eq!(t.functions[1].function, "cold");
    }

    #[test]
    fn the_json_shape_is_the_contracts() {
        let p = profile(&[("main;hot", 3), ("main;cold", 1)]);
        let v = serde_json::to_value(top(&p, Some(1))).unwrap();
        assert_eq!(v["samples"], 4);
        assert_eq!(v["duration_s"], 10.0);
        let row = &v["functions"][0];
        assert_eq!(row["function"], "hot");
        assert_eq!(row["module"], "/bin/demo");
        assert_eq!(row["self"], 0.75);
        assert_eq!(row["total"], 0.75);
        assert_eq!(row["self_samples"], 3);
        assert_eq!(row["total_samples"], 3);
        assert_eq!(v["functions"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_diff_gives_the_sign_of_each_change_largest_first() {
        let base = profile(&[("main;a", 70), ("main;b", 30)]);
        let new = profile(&[("main;a", 20), ("main;b", 60), ("main;c", 20)]);
        let d = diff(&base, &new, None);
        let row = |name: &str| d.functions.iter().find(|r| r.function == name).unwrap();
        assert!((row("a").delta + 0.5).abs() < 1e-12);
        assert!((row("b").delta - 0.3).abs() < 1e-12);
        assert!((row("c").delta - 0.2).abs() < 1e-12);
        assert_eq!(row("main").delta, 0.0);
        let order: Vec<&str> = d.functions.iter().map(|r| r.function.as_str()).collect();
        assert_eq!(order, ["a", "b", "c", "main"]);
    }

    #[test]
    fn folded_lines_are_root_first_and_summed_across_processes() {
        let mut b = ProfileBuilder::new(19, 0, 1);
        for pid in [1, 2] {
            let p = Process {
                pid,
                name: "x".into(),
                container: String::new(),
                ..Default::default()
            };
            b.add(&p, &[f("main"), f("a;b")], 2);
        }
        assert_eq!(folded(&b.finish()), "main;a:b 4\n");
    }
}
