//! `[[histograms]]`: bounds that increase.

use super::*;

#[test]
fn histogram_bounds_must_increase() {
    let e = err(&format!("{MIN}[histograms]\nbuckets = [1, 5, 2]\n"));
    assert_eq!((e.key.as_str(), e.line), ("histograms.buckets", Some(7)));
    assert!(e.problem.contains("increasing"), "{e}");
    assert_eq!(
        at(&format!(
            "{MIN}[[histograms.overrides]]\nprefix = \"a\"\nbuckets = []\n"
        )),
        key("histograms.overrides[0].buckets", 8)
    );
    let c = parse(&format!(
        "{MIN}[histograms]\nbuckets = [1, 2]\n[[histograms.overrides]]\nprefix = \"web.\"\nbuckets = [10]\n"
    ))
    .unwrap();
    assert_eq!(&*c.aggregate.histograms.for_name(b"web.x").values, &[10.0]);
    assert_eq!(
        &*c.aggregate.histograms.for_name(b"db.x").values,
        &[1.0, 2.0]
    );
}
