//! Hot-spot classes: the few kinds of work where a fleet's CPU goes
//! (compression, crypto, hashing, allocation, garbage collection, page
//! faults, system calls, serialisation, locks, regular expressions), each
//! with its usual remedy, and what share of a profile each takes, at what
//! cost (docs/PROFILING.md, "What to do about it").
//!
//! The classes and the rules that put a frame in one are data:
//! `classes.toml` beside this file ships them, and the config's
//! `[[profiler.classes]]` adds rules that come first. A rule matches a
//! frame when its `function` pattern matches the function's name and its
//! `module` pattern the module's file name (those it has). A sample's
//! class is that of the **innermost** frame any rule matches: `malloc`
//! called by a JSON encoder is allocation, the encoder's own frames
//! serialisation, and a page fault taken inside either a page fault. The
//! leaf alone would leave most samples of a library's private helpers
//! unclassified; the outermost frame would put everything under `main`'s
//! class. A rule of class `none` matches a frame without classifying it:
//! the walk goes on outward, as if no shipped rule had matched.
//!
//! Rules are matched once per distinct function of a profile, not per
//! sample: a profile of a million samples over 20,000 functions runs
//! 20,000 matches.

use hashbrown::HashMap;
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::cost::{per_year, Prices};
use crate::model::{Profile, ProfileBuilder};

/// The class name that matches a frame without classifying it.
pub const NONE: &str = "none";

/// The class of samples no rule classified.
pub const UNCLASSIFIED: &str = "unclassified";

/// The shipped classes and rules.
const SHIPPED: &str = include_str!("classes.toml");

/// A class, as the rules file declares it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassDef {
    /// Its name, as views print it.
    pub name: String,
    /// What usually helps.
    pub remedy: String,
}

/// A rule, as the rules file or `[[profiler.classes]]` writes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDef {
    /// The class it puts a frame in (or [`NONE`]).
    pub class: String,
    /// A regular expression on the function's name.
    #[serde(default)]
    pub function: Option<String>,
    /// A regular expression on the module's file name (`[kernel]` for the
    /// kernel).
    #[serde(default)]
    pub module: Option<String>,
    /// The remedy of a class of the user's own (one only the config
    /// names); ignored for a shipped class, whose remedy stays.
    #[serde(default)]
    pub remedy: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Shipped {
    class: Vec<ClassDef>,
    rule: Vec<RuleDef>,
}

/// A rule that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuleError {
    /// Neither pattern.
    #[error("a rule of class {0:?} has neither `function` nor `module`")]
    Empty(String),
    /// A pattern that is not a regular expression.
    #[error(
        "the {key} pattern {pattern:?} of class {class:?} is not a regular expression: {error}"
    )]
    Pattern {
        /// The class of the rule.
        class: String,
        /// `function` or `module`.
        key: &'static str,
        /// The pattern.
        pattern: String,
        /// What is wrong.
        error: String,
    },
    /// A class name views could not print or the page could not link.
    #[error("{0:?} is not a class name: use lower-case letters, digits and `_`")]
    Name(String),
}

struct Rule {
    /// Index into [`Classifier::classes`], `None` for [`NONE`].
    class: Option<usize>,
    function: Option<Regex>,
    module: Option<Regex>,
}

/// The classes and the compiled rules.
pub struct Classifier {
    classes: Vec<ClassDef>,
    rules: Vec<Rule>,
}

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classifier")
            .field("classes", &self.classes.len())
            .field("rules", &self.rules.len())
            .finish()
    }
}

impl Classifier {
    /// The shipped classes and rules alone.
    pub fn shipped() -> Classifier {
        Classifier::with(&[]).expect("the shipped rules compile (a unit test checks them)")
    }

    /// The shipped classes and rules after `extra` (the config's): an
    /// extra rule of a class not shipped declares that class, with the
    /// rule's `remedy`.
    ///
    /// # Errors
    ///
    /// A rule without a pattern, with a pattern that does not compile, or
    /// naming a class badly.
    pub fn with(extra: &[RuleDef]) -> Result<Classifier, RuleError> {
        let shipped: Shipped =
            toml::from_str(SHIPPED).expect("classes.toml parses (a unit test checks it)");
        let mut classes = shipped.class;
        let mut rules = Vec::with_capacity(extra.len() + shipped.rule.len());
        for def in extra.iter().chain(&shipped.rule) {
            rules.push(compile(def, &mut classes)?);
        }
        Ok(Classifier { classes, rules })
    }

    /// The classes, shipped first, in their order.
    pub fn classes(&self) -> &[ClassDef] {
        &self.classes
    }

    /// The class of a frame of `function` in `module` (a path): `None`
    /// when no rule matches, `Some(None)` when a [`NONE`] rule does.
    fn frame(&self, function: &str, module: &str) -> Option<Option<usize>> {
        let file = module.rsplit('/').next().unwrap_or(module);
        self.rules
            .iter()
            .find(|r| {
                r.function.as_ref().is_none_or(|p| p.is_match(function))
                    && r.module.as_ref().is_none_or(|p| p.is_match(file))
            })
            .map(|r| r.class)
    }

    /// The class of each stack of `profile`, in its order: the index of
    /// the class in [`Classifier::classes`] and the function that decided
    /// it, `None` for a stack no rule classifies.
    pub fn stacks(&self, profile: &Profile) -> Vec<Option<(usize, u32)>> {
        let mut of_function: HashMap<u32, Option<usize>> = HashMap::new();
        profile
            .stacks
            .iter()
            .map(|stack| {
                stack.frames.iter().rev().find_map(|&f| {
                    let class = *of_function.entry(f).or_insert_with(|| {
                        let func = &profile.functions[f as usize];
                        self.frame(&func.name, &func.module).flatten()
                    });
                    class.map(|c| (c, f))
                })
            })
            .collect()
    }
}

/// The shipped classes and rules alone, as [`Classifier::shipped`].
impl Default for Classifier {
    fn default() -> Classifier {
        Classifier::shipped()
    }
}

impl Classifier {
    /// Whether `name` is a class of this classifier or [`UNCLASSIFIED`]:
    /// what [`Classifier::keep`] accepts.
    pub fn knows(&self, name: &str) -> bool {
        name == UNCLASSIFIED || self.classes.iter().any(|c| c.name == name)
    }

    /// The class names, in their order, then [`UNCLASSIFIED`], joined by
    /// `, `: what an error about an unknown class lists.
    pub fn names(&self) -> String {
        let mut names: Vec<&str> = self.classes.iter().map(|c| c.name.as_str()).collect();
        names.push(UNCLASSIFIED);
        names.join(", ")
    }

    /// The stacks of `profile` in class `name` ([`UNCLASSIFIED`] for those
    /// of none), whole: shares of the result are of the class's samples.
    /// `None` when no class has that name.
    pub fn keep(&self, profile: &Profile, name: &str) -> Option<Profile> {
        let wanted = match self.classes.iter().position(|c| c.name == name) {
            Some(i) => Some(i),
            None if name == UNCLASSIFIED => None,
            None => return None,
        };
        let decided = self.stacks(profile);
        let mut out = ProfileBuilder::new(profile.frequency, profile.start_ns, profile.duration_ns);
        for (stack, class) in profile.stacks.iter().zip(decided) {
            if class.map(|(c, _)| c) == wanted {
                out.add(
                    &profile.processes[stack.process as usize],
                    stack.frames.iter().map(|&f| profile.function(f)),
                    stack.count,
                );
            }
        }
        Some(out.finish())
    }
}

fn compile(def: &RuleDef, classes: &mut Vec<ClassDef>) -> Result<Rule, RuleError> {
    if def.function.is_none() && def.module.is_none() {
        return Err(RuleError::Empty(def.class.clone()));
    }
    let name = &def.class;
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        || name == UNCLASSIFIED
    {
        return Err(RuleError::Name(name.clone()));
    }
    let pattern = |key: &'static str, p: &Option<String>| {
        p.as_deref()
            .map(|p| {
                Regex::new(p).map_err(|e| RuleError::Pattern {
                    class: name.clone(),
                    key,
                    pattern: p.to_string(),
                    error: e.to_string(),
                })
            })
            .transpose()
    };
    let class = if name == NONE {
        None
    } else {
        Some(match classes.iter().position(|c| &c.name == name) {
            Some(i) => i,
            None => {
                classes.push(ClassDef {
                    name: name.clone(),
                    remedy: def.remedy.clone().unwrap_or_default(),
                });
                classes.len() - 1
            }
        })
    };
    Ok(Rule {
        class,
        function: pattern("function", &def.function)?,
        module: pattern("module", &def.module)?,
    })
}

/// A function or process of a class, with its samples in the class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    /// The function's name, or the process's.
    pub name: String,
    /// The function's module; empty for a process.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub module: String,
    /// Samples of the class it takes.
    pub samples: u64,
}

/// One class's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassRow {
    /// The class ([`UNCLASSIFIED`] for the samples of none).
    pub class: String,
    /// What usually helps; empty for [`UNCLASSIFIED`].
    pub remedy: String,
    /// Samples in the class.
    pub samples: u64,
    /// Its fraction of the profile's samples.
    pub share: f64,
    /// CPU-seconds.
    pub cpu_s: f64,
    /// Cost over the period, where `core_cost_per_hour` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Cost a year at the period's rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_year: Option<f64>,
    /// Kilograms of CO2e over the period, where
    /// `co2_grams_per_core_hour` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub co2_kg: Option<f64>,
    /// Kilograms of CO2e a year.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub co2_kg_per_year: Option<f64>,
    /// The functions that put samples in the class (the innermost
    /// matching frame of each), most samples first.
    pub functions: Vec<Part>,
    /// The processes whose samples these are, most first.
    pub processes: Vec<Part>,
}

/// The classes view of a profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classes {
    /// Samples in the profile.
    pub samples: u64,
    /// The period's length in seconds.
    pub duration_s: f64,
    /// The currency of the costs, where `core_cost_per_hour` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// The classes with samples, most first, then [`UNCLASSIFIED`].
    pub classes: Vec<ClassRow>,
}

/// The classes of `profile`'s samples, each with its `top` functions and
/// processes, priced by `prices`.
pub fn classes(profile: &Profile, classifier: &Classifier, prices: &Prices, top: usize) -> Classes {
    let decided = classifier.stacks(profile);
    let n = classifier.classes().len();
    // Per class (the last slot unclassified): samples, per function, per
    // process name.
    let mut samples = vec![0u64; n + 1];
    let mut functions: Vec<HashMap<u32, u64>> = vec![HashMap::new(); n + 1];
    let mut processes: Vec<HashMap<&str, u64>> = vec![HashMap::new(); n + 1];
    for (stack, class) in profile.stacks.iter().zip(&decided) {
        let (slot, function) = match class {
            Some((c, f)) => (*c, Some(*f)),
            None => (n, stack.frames.last().copied()),
        };
        samples[slot] += stack.count;
        if let Some(f) = function {
            *functions[slot].entry(f).or_insert(0) += stack.count;
        }
        let process = &profile.processes[stack.process as usize].name;
        *processes[slot].entry(process.as_str()).or_insert(0) += stack.count;
    }
    let total = profile.samples();
    let per_sample = profile.seconds_per_sample();
    let duration_s = profile.duration_ns as f64 / 1e9;
    let mut rows: Vec<ClassRow> = (0..=n)
        .filter(|&i| samples[i] > 0)
        .map(|i| {
            let (class, remedy) = match classifier.classes().get(i) {
                Some(c) => (c.name.clone(), c.remedy.clone()),
                None => (UNCLASSIFIED.to_string(), String::new()),
            };
            let cpu_s = samples[i] as f64 * per_sample;
            let mut fs: Vec<Part> = functions[i]
                .iter()
                .map(|(&f, &s)| {
                    let func = &profile.functions[f as usize];
                    Part {
                        name: func.name.clone(),
                        module: func.module.clone(),
                        samples: s,
                    }
                })
                .collect();
            let mut ps: Vec<Part> = processes[i]
                .iter()
                .map(|(&p, &s)| Part {
                    name: p.to_string(),
                    module: String::new(),
                    samples: s,
                })
                .collect();
            for parts in [&mut fs, &mut ps] {
                parts.sort_by(|a, b| {
                    b.samples
                        .cmp(&a.samples)
                        .then_with(|| (&a.name, &a.module).cmp(&(&b.name, &b.module)))
                });
                parts.truncate(top);
            }
            ClassRow {
                class,
                remedy,
                samples: samples[i],
                share: if total == 0 {
                    0.0
                } else {
                    samples[i] as f64 / total as f64
                },
                cpu_s,
                cost: prices.cost(cpu_s),
                cost_per_year: prices.cost(cpu_s).map(|c| per_year(c, duration_s)),
                co2_kg: prices.co2_kg(cpu_s),
                co2_kg_per_year: prices.co2_kg(cpu_s).map(|c| per_year(c, duration_s)),
                functions: fs,
                processes: ps,
            }
        })
        .collect();
    // Most samples first; unclassified last whatever its size.
    rows.sort_by(|a, b| {
        (a.class == UNCLASSIFIED)
            .cmp(&(b.class == UNCLASSIFIED))
            .then_with(|| b.samples.cmp(&a.samples))
            .then_with(|| a.class.cmp(&b.class))
    });
    Classes {
        samples: total,
        duration_s,
        currency: prices
            .core_cost_per_hour
            .as_ref()
            .map(|p| p.currency.clone()),
        classes: rows,
    }
}

/// The classes view as text: a line per class with its share, CPU-seconds
/// and cost a year, then its top functions and processes and its remedy.
pub fn classes_text(c: &Classes) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} samples over {:.1} s, by class (the innermost frame a rule matches)",
        c.samples, c.duration_s
    );
    for row in &c.classes {
        let _ = write!(
            out,
            "\n{:<14} {:>6.2}%  {:>10.3} CPU-s",
            row.class,
            row.share * 100.0,
            row.cpu_s
        );
        if let (Some(y), Some(cur)) = (row.cost_per_year, &c.currency) {
            let _ = write!(out, "  {y:.2} {cur}/year");
        }
        if let Some(y) = row.co2_kg_per_year {
            let _ = write!(out, "  {y:.1} kg CO2e/year");
        }
        out.push('\n');
        let names = |parts: &[Part]| {
            parts
                .iter()
                .map(|p| format!("{} ({})", p.name, p.samples))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(out, "    functions: {}", names(&row.functions));
        let _ = writeln!(out, "    processes: {}", names(&row.processes));
        if !row.remedy.is_empty() {
            let _ = writeln!(out, "    remedy:    {}", row.remedy);
        }
    }
    out
}

/// One class's change between two profiles.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassChange {
    /// The class.
    pub class: String,
    /// Its share of the base profile's samples.
    pub share_base: f64,
    /// Its share of the new profile's samples.
    pub share_new: f64,
    /// `share_new - share_base`.
    pub delta: f64,
    /// Its CPU-seconds in the base profile.
    pub cpu_s_base: f64,
    /// Its CPU-seconds in the new profile.
    pub cpu_s_new: f64,
    /// How its cost a year changed, each side at its own period's rate;
    /// absent without `core_cost_per_hour`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta_cost_per_year: Option<f64>,
    /// Its remedy.
    pub remedy: String,
}

/// How the classes changed between two profiles.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassesDiff {
    /// Samples in the base profile.
    pub samples_base: u64,
    /// Samples in the new profile.
    pub samples: u64,
    /// The currency of the costs, where `core_cost_per_hour` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// Every class of either side, by `|delta|` descending.
    pub classes: Vec<ClassChange>,
}

/// How each class of `base` or `new` changed.
pub fn diff(base: &Classes, new: &Classes) -> ClassesDiff {
    let mut names: Vec<&str> = Vec::new();
    for r in base.classes.iter().chain(&new.classes) {
        if !names.contains(&r.class.as_str()) {
            names.push(&r.class);
        }
    }
    let mut classes: Vec<ClassChange> = names
        .into_iter()
        .map(|name| {
            let (b, n) = (
                base.classes.iter().find(|r| r.class == name),
                new.classes.iter().find(|r| r.class == name),
            );
            let share = |r: Option<&ClassRow>| r.map_or(0.0, |r| r.share);
            let cpu = |r: Option<&ClassRow>| r.map_or(0.0, |r| r.cpu_s);
            let year = |r: Option<&ClassRow>, side: &Classes| {
                side.currency
                    .as_ref()
                    .map(|_| r.and_then(|r| r.cost_per_year).unwrap_or(0.0))
            };
            ClassChange {
                class: name.to_string(),
                share_base: share(b),
                share_new: share(n),
                delta: share(n) - share(b),
                cpu_s_base: cpu(b),
                cpu_s_new: cpu(n),
                delta_cost_per_year: year(n, new).zip(year(b, base)).map(|(n, b)| n - b),
                remedy: b.or(n).map(|r| r.remedy.clone()).unwrap_or_default(),
            }
        })
        .collect();
    classes.sort_by(|a, b| {
        b.delta
            .abs()
            .total_cmp(&a.delta.abs())
            .then_with(|| a.class.cmp(&b.class))
    });
    ClassesDiff {
        samples_base: base.samples,
        samples: new.samples,
        currency: new.currency.clone(),
        classes,
    }
}

/// A class diff as text: a line per class, the largest change first.
pub fn diff_text(d: &ClassesDiff) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} samples before, {} after, by class\n\n{:<14} {:>8} {:>8} {:>9}",
        d.samples_base, d.samples, "class", "before", "after", "change"
    );
    for c in &d.classes {
        let _ = write!(
            out,
            "{:<14} {:>7.2}% {:>7.2}% {:>+8.2}%",
            c.class,
            c.share_base * 100.0,
            c.share_new * 100.0,
            c.delta * 100.0
        );
        if let (Some(y), Some(cur)) = (c.delta_cost_per_year, &d.currency) {
            let _ = write!(out, "  {y:+.2} {cur}/year");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Function, Process};

    fn class_of(c: &Classifier, function: &str, module: &str) -> Option<String> {
        c.frame(function, module)
            .flatten()
            .map(|i| c.classes()[i].name.clone())
    }

    #[test]
    fn the_shipped_rules_parse_and_name_declared_classes() {
        let shipped: Shipped = toml::from_str(SHIPPED).unwrap();
        let c = Classifier::shipped();
        assert_eq!(
            c.classes().len(),
            shipped.class.len(),
            "a rule named an undeclared class"
        );
        assert_eq!(c.classes().len(), 10);
        assert!(c.classes().iter().all(|k| !k.remedy.is_empty()));
    }

    #[test]
    fn frames_of_each_runtime_land_in_their_class() {
        let c = Classifier::shipped();
        for (function, module, want) in [
            (
                "deflate",
                "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
                "compression",
            ),
            (
                "0x1234",
                "/usr/lib/x86_64-linux-gnu/libz.so.1",
                "compression",
            ),
            ("longest_match", "/usr/bin/app", "compression"),
            ("ZSTD_compressBlock_fast", "/usr/bin/app", "compression"),
            (
                "<flate2::zio::Writer<W,D> as std::io::Write>::write",
                "/bin/a",
                "compression",
            ),
            (
                "compress/flate.(*compressor).deflate",
                "/bin/go",
                "compression",
            ),
            (
                "java.util.zip.Inflater.inflateBytesBytes",
                "[jit]",
                "compression",
            ),
            ("SHA256_Update", "/bin/a", "crypto"),
            ("aes_gcm_encrypt", "/usr/lib/libcrypto.so.3", "crypto"),
            ("ring::aead::gcm::seal", "/bin/a", "crypto"),
            ("crypto/sha256.block", "/bin/go", "crypto"),
            (
                "<std::hash::random::DefaultHasher as core::hash::Hasher>::write",
                "/bin/a",
                "hashing",
            ),
            ("runtime.mapaccess2_faststr", "/bin/go", "hashing"),
            ("XXH3_64bits", "/bin/a", "hashing"),
            (
                "malloc",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "allocation",
            ),
            (
                "_int_free",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "allocation",
            ),
            (
                "operator new(unsigned long)",
                "/usr/lib/libstdc++.so.6",
                "allocation",
            ),
            ("runtime.growslice", "/bin/go", "allocation"),
            ("runtime.mallocgc", "/bin/go", "allocation"),
            ("__rust_alloc", "/bin/a", "allocation"),
            ("je_malloc", "/bin/a", "allocation"),
            ("runtime.scanobject", "/bin/go", "gc"),
            ("runtime.gcBgMarkWorker", "/bin/go", "gc"),
            (
                "G1ParScanThreadState::trim_queue",
                "/usr/lib/jvm/lib/server/libjvm.so",
                "gc",
            ),
            ("clear_page_erms", "[kernel]", "page_faults"),
            ("exc_page_fault", "[kernel]", "page_faults"),
            ("entry_SYSCALL_64_after_hwframe", "[kernel]", "syscalls"),
            ("do_syscall_64", "[kernel]", "syscalls"),
            (
                "serde_json::ser::format_escaped_str",
                "/bin/a",
                "serialization",
            ),
            (
                "encoding/json.(*decodeState).object",
                "/bin/go",
                "serialization",
            ),
            (
                "google::protobuf::internal::WireFormatLite::ReadBytes",
                "/bin/a",
                "serialization",
            ),
            (
                "com.fasterxml.jackson.core.json.UTF8JsonGenerator.writeString",
                "[jit]",
                "serialization",
            ),
            (
                "encoder_listencode_dict",
                "/usr/bin/python3.11",
                "serialization",
            ),
            ("native_queued_spin_lock_slowpath", "[kernel]", "locks"),
            ("__write", "/usr/lib/x86_64-linux-gnu/libc.so.6", "syscalls"),
            ("futex_wait", "[kernel]", "locks"),
            (
                "pthread_mutex_lock",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "locks",
            ),
            ("sync.(*Mutex).lockSlow", "/bin/go", "locks"),
            (
                "parking_lot::raw_mutex::RawMutex::lock_slow",
                "/bin/a",
                "locks",
            ),
            ("pcre2_match_8", "/usr/lib/libpcre2-8.so.0", "regex"),
            ("regex_automata::meta::Regex::search", "/bin/a", "regex"),
            ("regexp.(*Regexp).doExecute", "/bin/go", "regex"),
        ] {
            assert_eq!(
                class_of(&c, function, module).as_deref(),
                Some(want),
                "{function} in {module}"
            );
        }
        // Plain code, and names that only look alike, are in no class.
        for (function, module) in [
            ("main", "/bin/a"),
            ("work", "/bin/a"),
            ("my_compressor_config", "/bin/a"),
            ("freeze", "/bin/a"),
            ("vfs_write", "[kernel]"),
            ("clear_page_erms", "/bin/a"),
            ("my_flate2::write", "/bin/a"),
            ("_raw_spin_lock", "[kernel]"),
            ("_raw_spin_unlock_irqrestore", "[kernel]"),
            ("write", "/bin/a"),
        ] {
            assert_eq!(
                class_of(&c, function, module),
                None,
                "{function} in {module}"
            );
        }
    }

    fn process(name: &str) -> Process {
        Process {
            pid: 1,
            name: name.into(),
            tid: 1,
            thread: name.into(),
            host: String::new(),
            container: String::new(),
            pod: String::new(),
        }
    }

    fn f(name: &str, module: &str) -> Function {
        Function {
            name: name.into(),
            module: module.into(),
        }
    }

    #[test]
    fn a_sample_takes_the_class_of_its_innermost_matching_frame() {
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let mut b = ProfileBuilder::new(100, 0, 10_000_000_000);
        let p = process("server");
        let (main, encode, malloc, fault, work) = (
            f("main", "/bin/server"),
            f("serde_json::ser::to_writer", "/bin/server"),
            f("malloc", libc),
            f("clear_page_erms", "[kernel]"),
            f("work", "/bin/server"),
        );
        b.add(&p, [&main, &encode], 30);
        b.add(&p, [&main, &encode, &malloc], 20);
        b.add(&p, [&main, &encode, &malloc, &fault], 10);
        b.add(&p, [&main, &work], 40);
        let profile = b.finish();
        let prices = Prices {
            core_cost_per_hour: Some("0.10 USD".parse().unwrap()),
            co2_grams_per_core_hour: None,
        };
        let c = classes(&profile, &Classifier::shipped(), &prices, 5);
        let got: Vec<(&str, u64)> = c
            .classes
            .iter()
            .map(|r| (r.class.as_str(), r.samples))
            .collect();
        assert_eq!(
            got,
            [
                ("serialization", 30),
                ("allocation", 20),
                ("page_faults", 10),
                ("unclassified", 40)
            ]
        );
        let ser = &c.classes[0];
        assert_eq!(ser.functions[0].name, "serde_json::ser::to_writer");
        assert_eq!(ser.processes[0].name, "server");
        assert!((ser.share - 0.3).abs() < 1e-12);
        assert!((ser.cpu_s - 0.3).abs() < 1e-12);
        let year = per_year(0.3 / 3600.0 * 0.10, 10.0);
        assert!((ser.cost_per_year.unwrap() - year).abs() < 1e-12);
        assert_eq!(c.currency.as_deref(), Some("USD"));
        assert!(c.classes[3].remedy.is_empty());
        // One class's stacks, whole.
        let shipped = Classifier::shipped();
        let alloc = shipped.keep(&profile, "allocation").unwrap();
        assert_eq!(alloc.samples(), 20);
        assert_eq!(alloc.stacks[0].frames.len(), 3);
        assert_eq!(shipped.keep(&profile, UNCLASSIFIED).unwrap().samples(), 40);
        assert!(shipped.keep(&profile, "nonsense").is_none());
        let text = classes_text(&c);
        assert!(
            text.contains("serialization") && text.contains("USD/year"),
            "{text}"
        );
        // Against a profile of the plain loop alone: every class shrank
        // but unclassified, which grew to all.
        let mut b = ProfileBuilder::new(100, 0, 10_000_000_000);
        b.add(&p, [&main, &work], 50);
        let after = classes(&b.finish(), &Classifier::shipped(), &prices, 5);
        let d = diff(&c, &after);
        assert_eq!(d.classes[0].class, "unclassified");
        assert!((d.classes[0].delta - 0.6).abs() < 1e-12);
        let ser = d
            .classes
            .iter()
            .find(|k| k.class == "serialization")
            .unwrap();
        assert!((ser.delta + 0.3).abs() < 1e-12);
        assert!((ser.delta_cost_per_year.unwrap() + year).abs() < 1e-12);
        assert!(diff_text(&d).contains("serialization"));
    }

    #[test]
    fn config_rules_come_first_add_classes_and_none_lets_the_walk_go_on() {
        let rules = vec![
            RuleDef {
                class: "templating".into(),
                function: Some("^render_".into()),
                module: None,
                remedy: Some("cache rendered pages".into()),
            },
            RuleDef {
                class: NONE.into(),
                function: Some("^malloc$".into()),
                module: None,
                remedy: None,
            },
            RuleDef {
                class: "compression".into(),
                function: Some("^my_codec$".into()),
                module: None,
                remedy: Some("ignored".into()),
            },
        ];
        let c = Classifier::with(&rules).unwrap();
        assert_eq!(
            class_of(&c, "render_page", "/bin/a").as_deref(),
            Some("templating")
        );
        assert_eq!(
            class_of(&c, "my_codec", "/bin/a").as_deref(),
            Some("compression")
        );
        assert_eq!(class_of(&c, "malloc", "/lib/libc.so.6"), None);
        let templating = c.classes().iter().find(|k| k.name == "templating").unwrap();
        assert_eq!(templating.remedy, "cache rendered pages");
        let compression = c
            .classes()
            .iter()
            .find(|k| k.name == "compression")
            .unwrap();
        assert!(compression.remedy.starts_with("a faster library"));
        // `malloc` under `render_page`: the none rule passes the sample on.
        let mut b = ProfileBuilder::new(100, 0, 1_000_000_000);
        b.add(
            &process("web"),
            [&f("render_page", "/bin/a"), &f("malloc", "/lib/libc.so.6")],
            3,
        );
        let got = classes(&b.finish(), &c, &Prices::default(), 5);
        assert_eq!(got.classes[0].class, "templating");
        // Bad rules are refused with what is wrong.
        let bad = |class: &str, function: Option<&str>| {
            Classifier::with(&[RuleDef {
                class: class.into(),
                function: function.map(str::to_string),
                module: None,
                remedy: None,
            }])
            .unwrap_err()
            .to_string()
        };
        assert!(bad("x", None).contains("neither"));
        assert!(bad("x", Some("(")).contains("not a regular expression"));
        assert!(bad("Bad Name", Some("a")).contains("not a class name"));
        assert!(bad(UNCLASSIFIED, Some("a")).contains("not a class name"));
    }
}
