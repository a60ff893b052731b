//! Property: `Shard::record_batch` is `Shard::record` point by point. Same
//! result for every point, in the same order, and the same flushed
//! windows, for batches shorter and longer than `shard::BATCH`, with series
//! created inside a batch, several tag orders of one series, points the
//! series limits refuse, and series expiring between windows.

use std::sync::Arc;

use proptest::prelude::*;
use sonde_aggregate::RecordError;
use sonde_aggregate::{AggregateConfig, Aggregator, Batch, Shard};
use sonde_proto::{Kind, Point, TagSyntax, Value};

/// One generated point, owned.
#[derive(Clone, Debug)]
struct P {
    kind: Kind,
    name: &'static str,
    tags: &'static str,
    syntax: TagSyntax,
    value: f64,
    delta: bool,
    ts: Option<i64>,
}

impl P {
    fn point(&self) -> Point<'_> {
        let value = match (self.kind, self.delta) {
            (Kind::Set, _) => Value::Member(b"m"),
            (Kind::Gauge, true) => Value::Delta(self.value),
            _ => Value::Number(self.value),
        };
        Point {
            kind: self.kind,
            name: self.name.as_bytes(),
            tags: self.tags.as_bytes(),
            tag_syntax: self.syntax,
            value,
            sample_rate: 1.0,
            timestamp: self.ts,
        }
    }
}

fn point() -> impl Strategy<Value = P> {
    (
        proptest::sample::select(Kind::ALL.to_vec()),
        proptest::sample::select(vec!["a", "b", "web.latency", "x.y.z"]),
        // One series in several spellings, other series, and a tag string
        // that does not split (a drop found only on the slow path).
        proptest::sample::select(vec![
            "", "h=1", "h=2", "h=1|z=3", "z=3|h=1", "z=3 h=1", "=x",
        ]),
        any::<bool>(),
        -100i32..100,
        any::<bool>(),
        proptest::option::of(1_700_000_000i64..1_700_000_003),
    )
        .prop_map(|(kind, name, tags, dog, v, delta, ts)| {
            let ts = match kind {
                Kind::TsStore => Some(ts.unwrap_or(1_700_000_000)),
                Kind::Count | Kind::Gauge => ts,
                _ => None,
            };
            let (tags, syntax) = if dog {
                (tags, TagSyntax::Msgpack)
            } else {
                // The same tags in DogStatsD spelling: another spelling of
                // the same series.
                (
                    match tags {
                        "h=1" => "h:1",
                        "h=2" => "h:2",
                        "h=1|z=3" => "h:1,z:3",
                        "z=3|h=1" | "z=3 h=1" => "z:3,h:1",
                        other => other,
                    },
                    TagSyntax::DogStatsd,
                )
            };
            P {
                kind,
                name,
                tags,
                syntax,
                value: f64::from(v),
                delta,
                ts,
            }
        })
}

type Row = (String, String, String, i64, f64);

/// Each window's per-point results, and each window's rows.
type Outcome = (Vec<Vec<Result<(), RecordError>>>, Vec<Vec<Row>>);

fn rows(batch: &Batch) -> Vec<Row> {
    batch
        .points()
        .map(|p| {
            let tags: Vec<String> = p.series.tags().map(|(k, v)| format!("{k}={v}")).collect();
            (
                p.series.name().to_string(),
                tags.join(","),
                p.suffix.as_str().to_string(),
                p.timestamp,
                p.value,
            )
        })
        .collect()
}

/// Every point's result and every window's output, recording each window
/// with `record_window`.
fn run(
    windows: &[Vec<P>],
    config: &Arc<AggregateConfig>,
    mut record_window: impl FnMut(&mut Shard, &[Point<'_>]) -> Vec<Result<(), RecordError>>,
) -> Outcome {
    let mut shard = Shard::new(Arc::clone(config));
    let mut agg = Aggregator::new(Arc::clone(config));
    let (mut results, mut out) = (Vec::new(), Vec::new());
    for (w, points) in windows.iter().enumerate() {
        let points: Vec<Point<'_>> = points.iter().map(P::point).collect();
        results.push(record_window(&mut shard, &points));
        agg.absorb(&mut shard);
        let start = 1_700_000_000 + 10 * w as i64;
        let mut batch = Batch::new(start);
        agg.flush(start, 10.0, &mut batch);
        out.push(rows(&batch));
    }
    (results, out)
}

fn one_by_one(shard: &mut Shard, points: &[Point<'_>]) -> Vec<Result<(), RecordError>> {
    points.iter().map(|p| shard.record(p)).collect()
}

fn batched(chunk: usize) -> impl FnMut(&mut Shard, &[Point<'_>]) -> Vec<Result<(), RecordError>> {
    move |shard, points| {
        let mut results = vec![None; points.len()];
        for (c, part) in points.chunks(chunk).enumerate() {
            let mut expected = 0;
            shard.record_batch(part, |i, r| {
                // Each point once, in input order.
                assert_eq!(i, expected);
                expected += 1;
                results[c * chunk + i] = Some(r);
            });
            assert_eq!(expected, part.len());
        }
        results.into_iter().map(Option::unwrap).collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_batch_records_exactly_what_single_points_record(
        windows in prop::collection::vec(prop::collection::vec(point(), 0..80), 1..4),
        chunk in 1usize..40,
        max_series in prop_oneof![Just(usize::MAX), 1usize..8],
        per_metric in prop_oneof![Just(None), (1u32..3).prop_map(Some)],
        expire_windows in 1u32..3,
    ) {
        let config = Arc::new(AggregateConfig {
            max_series,
            max_series_per_metric: per_metric,
            expire_windows,
            ..AggregateConfig::default()
        });
        let (r1, w1) = run(&windows, &config, one_by_one);
        let (r2, w2) = run(&windows, &config, batched(chunk));
        prop_assert_eq!(r1, r2);
        prop_assert_eq!(w1, w2);
    }
}
