//! The Prometheus text exposition format (version 0.0.4).
//!
//! Names get every character outside `[a-zA-Z0-9_:]` replaced by `_`
//! (ARCHITECTURE.md), label names every character outside `[a-zA-Z0-9_]`;
//! either gets a leading `_` if it would start with a digit, which
//! Prometheus rejects. Running totals are typed `counter`, everything else
//! `gauge`. Samples carry no timestamp: a scrape reads the latest window.

use sonde_aggregate::OutPoint;

use crate::write_number;

/// Appends `name` with every character outside `[a-zA-Z0-9_:]` replaced by `_`.
pub fn sanitize_name(name: &str, out: &mut String) {
    sanitize(name, out, true);
}

/// Appends a label name with every character outside `[a-zA-Z0-9_]` replaced by `_`.
pub fn sanitize_label(name: &str, out: &mut String) {
    sanitize(name, out, false);
}

fn sanitize(name: &str, out: &mut String, allow_colon: bool) {
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.is_empty() {
        out.push('_');
    }
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' || (allow_colon && c == ':') {
            c
        } else {
            '_'
        }
    }));
}

/// A label value as the text format writes it: backslash, double quote
/// and newline escaped; borrowed when none occurs. The exporter sink and
/// the agent's own `/metrics` both write label values with it.
pub fn escape_label_value(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return std::borrow::Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len() + 2);
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Appends the exposition of `points` to `out`, one `# TYPE` line per
/// metric name with all of its samples after it.
pub fn encode<'a>(points: impl IntoIterator<Item = OutPoint<'a>>, out: &mut Vec<u8>) {
    let mut named: Vec<(String, OutPoint<'a>)> = points
        .into_iter()
        .map(|p| {
            let mut s = String::new();
            sanitize_name(&p.name(), &mut s);
            (s, p)
        })
        .collect();
    // Prometheus wants every sample of a name together; keep series order
    // inside a name stable so scrapes diff cleanly.
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let mut last: Option<&str> = None;
    let mut label = String::new();
    for (name, p) in &named {
        if last != Some(name.as_str()) {
            let kind = if p.monotonic { "counter" } else { "gauge" };
            out.extend_from_slice(format!("# TYPE {name} {kind}\n").as_bytes());
            last = Some(name);
        }
        out.extend_from_slice(name.as_bytes());
        let mut first = true;
        p.for_each_tag(|k, v| {
            out.push(if first { b'{' } else { b',' });
            first = false;
            label.clear();
            sanitize_label(k, &mut label);
            out.extend_from_slice(label.as_bytes());
            out.extend_from_slice(b"=\"");
            out.extend_from_slice(escape_label_value(v).as_bytes());
            out.push(b'"');
        });
        if !first {
            out.push(b'}');
        }
        out.push(b' ');
        write_number(out, p.value);
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use sonde_aggregate::Suffix;

    #[test]
    fn a_label_value_is_escaped_only_where_it_must_be() {
        use std::borrow::Cow;
        assert!(matches!(
            escape_label_value("plain é"),
            Cow::Borrowed("plain é")
        ));
        assert_eq!(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }

    fn point(
        name: &str,
        tags: &[(&str, &str)],
        suffix: Suffix,
        value: f64,
        monotonic: bool,
    ) -> OutPoint<'static> {
        OutPoint {
            suffix,
            monotonic,
            ..testing::point(name, tags, value, 0)
        }
    }

    #[test]
    fn names_and_labels_are_sanitised_and_grouped() {
        let points = [
            point("web.hits", &[("host", "a")], Suffix::None, 3.0, true),
            point("9lives-x", &[("a.b", "q\"\\\n")], Suffix::None, 1.5, false),
            point("web.hits", &[("host", "b")], Suffix::None, 4.0, true),
        ];
        let mut out = Vec::new();
        encode(points, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "# TYPE _9lives_x gauge\n\
             _9lives_x{a_b=\"q\\\"\\\\\\n\"} 1.5\n\
             # TYPE web_hits counter\n\
             web_hits{host=\"a\"} 3\n\
             web_hits{host=\"b\"} 4\n"
        );
    }

    #[test]
    fn colons_survive_in_names_but_not_in_labels() {
        let mut s = String::new();
        sanitize_name("a:b.c", &mut s);
        assert_eq!(s, "a:b_c");
        s.clear();
        sanitize_label("a:b", &mut s);
        assert_eq!(s, "a_b");
    }
}
