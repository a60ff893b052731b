//! `/api/profiles/` from a fleet store (`[profiler] store`): the same
//! paths and parameters as from this host's store, computed in
//! ClickHouse. The top table and a diff's two tables are `GROUP BY`s
//! there ([`FleetStore::top`]); flame graphs, folded stacks and pprof
//! fetch the range's stacks summed over periods, processes and threads
//! (and per host with `by=host`), never the fleet's sample rows.
//!
//! The classes, and any table of one class (`class=`), are of the
//! range's stacks summed per host there ([`FleetStore::profile`]),
//! classified here, as `sonde profile --store ... --classes` does.
//!
//! What the fleet store cannot answer is a 400 saying so: `by=process`
//! or `by=thread` (its stacks are summed over them) and `focus=` on a
//! table of every class (computed in ClickHouse over whole stacks; the
//! flame graphs, the classes and one class's tables take it). A store that cannot be reached or refuses a query is a 502
//! naming the store, after at most its connect timeout when it is down.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use sonde_profile::classes::{self, Classifier};
use sonde_profile::cost::Prices;
use sonde_profile::store::Ago;
use sonde_profile::{flamegraph, views, Profile, Root};
use sonde_sinks::clickhouse::store::{Filter, FleetStore, StoreError, ThreadSamples};

use super::{body, describe, error, json, ProcessRow, Query, ThreadRow, SVG};

/// The most (host, process, thread name) rows `/api/profiles/processes`
/// lists from a fleet: enough for a page's filters, bounded for a large
/// fleet.
const MAX_THREADS: usize = 10_000;

/// Answers `path` from `fleet`, as of `now_s` (Unix seconds).
pub(super) fn answer(
    fleet: &FleetStore,
    prices: &Prices,
    classifier: &Classifier,
    now_s: u64,
    path: &str,
    query: Option<&str>,
) -> Response<Full<Bytes>> {
    let q = match Query::parse(query).and_then(|q| q.for_path(path, classifier)) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    if let Err(e) = supported(&q, path) {
        return error(StatusCode::BAD_REQUEST, &e);
    }
    let filter = |span: Ago| {
        let (from_s, until_s) = span.bounds(now_s);
        Filter {
            from_s,
            until_s,
            hosts: q.select.hosts.clone(),
            pids: q.select.pids.clone(),
            processes: q.select.processes.clone(),
            thread: q.select.thread.as_ref().map(|t| t.as_str().to_string()),
            containers: q.select.containers.clone(),
        }
    };
    let by_host = q.by.contains(&Root::Host);
    let profile = |span: Ago, by_host: bool| -> Result<Profile, StoreError> {
        Ok(q.class_and_focus(fleet.profile(&filter(span), by_host)?, classifier))
    };
    // Both sides of a diff, per host; one query when they name the same
    // range.
    let both = || -> Result<(Profile, Profile), StoreError> {
        let base = profile(q.base, true)?;
        let new = if q.new == q.base {
            base.clone()
        } else {
            profile(q.new, true)?
        };
        Ok((base, new))
    };
    let result: Result<Response<Full<Bytes>>, StoreError> = match path {
        // One class's table needs its stacks: ClickHouse's `GROUP BY`
        // over functions cannot tell a sample's class.
        "/api/profiles/top" if q.class.is_some() => profile(q.range, true).map(|p| {
            let mut top = views::top(&p, Some(q.top));
            views::price_top(&mut top, prices);
            json(&top)
        }),
        "/api/profiles/top" => fleet.top(&filter(q.range), Some(q.top)).map(|mut top| {
            views::price_top(&mut top, prices);
            json(&top)
        }),
        "/api/profiles/classes" => {
            profile(q.range, true).map(|p| json(&classes::classes(&p, classifier, prices, q.top)))
        }
        "/api/profiles/classes/diff" => both().map(|(base, new)| {
            json(&classes::diff(
                &classes::classes(&base, classifier, prices, q.top),
                &classes::classes(&new, classifier, prices, q.top),
            ))
        }),
        "/api/profiles/diff" if q.class.is_some() => both().map(|(base, new)| {
            let mut diff = views::diff(&base, &new, Some(q.top));
            views::price_diff(&mut diff, prices);
            json(&diff)
        }),
        "/api/profiles/hosts" => fleet.hosts(&filter(q.range)).map(|h| json(&h)),
        "/api/profiles/flamegraph" => profile(q.range, by_host).map(|p| {
            let options = flamegraph::Options {
                title: format!(
                    "{} samples of the fleet, {}",
                    p.samples(),
                    describe(q.range)
                ),
                roots: q.by.clone(),
                layout: q.layout,
                ..Default::default()
            };
            body(SVG, flamegraph::render(&p, &options))
        }),
        "/api/profiles/folded" => profile(q.range, by_host)
            .map(|p| body("text/plain; charset=utf-8", views::folded(&p.rooted(&q.by)))),
        // Per host, so that the export keeps its `host` labels and merges
        // with other exports as one host's does.
        "/api/profiles/pprof" => {
            profile(q.range, true).map(|p| super::pprof_download(&p, "sonde-fleet", q.range))
        }
        "/api/profiles/processes" => fleet
            .threads(&filter(q.range), MAX_THREADS)
            .map(|t| json(&processes(&t))),
        "/api/profiles/diff" => (|| {
            // One query when both sides name the same range.
            let base = fleet.top(&filter(q.base), None)?;
            let new = if q.new == q.base {
                base.clone()
            } else {
                fleet.top(&filter(q.new), None)?
            };
            let mut diff = views::diff_tops(&base, &new, Some(q.top));
            views::price_diff(&mut diff, prices);
            Ok(json(&diff))
        })(),
        "/api/profiles/diff/flamegraph" => profile(q.base, by_host).and_then(|base| {
            let new = if q.new == q.base {
                base.clone()
            } else {
                profile(q.new, by_host)?
            };
            let options = flamegraph::Options {
                title: format!(
                    "the fleet {} against {}: red grew, blue shrank (widths from the later)",
                    describe(q.new),
                    describe(q.base)
                ),
                roots: q.by.clone(),
                layout: q.layout,
                ..Default::default()
            };
            Ok(body(SVG, flamegraph::render_diff(&base, &new, &options)))
        }),
        _ => {
            return error(StatusCode::NOT_FOUND, &format!("no such path {path:?}"));
        }
    };
    result.unwrap_or_else(|e| unreachable_store(fleet, &e))
}

/// What the fleet store cannot do with `q` on `path`, in words.
fn supported(q: &Query, path: &str) -> Result<(), String> {
    if q.by.iter().any(|r| *r != Root::Host) {
        return Err(
            "by=: the fleet store sums each stack over processes and threads, so its flame graphs are rooted at host only (by=host)"
                .into(),
        );
    }
    if q.focus.is_some()
        && q.class.is_none()
        && matches!(path, "/api/profiles/top" | "/api/profiles/diff")
    {
        return Err(format!(
            "focus=: the fleet store computes {path}'s table in ClickHouse over whole stacks; focus applies to its flame graphs, folded stacks, pprof, classes and the tables of one class (class=)"
        ));
    }
    Ok(())
}

/// A 502 naming the store: the page's requests were answered, the
/// store's were not.
fn unreachable_store(fleet: &FleetStore, e: &StoreError) -> Response<Full<Bytes>> {
    let mut r = json(&serde_json::json!({
        "error": format!("the fleet store {} could not answer: {e}", fleet.uri()),
        "store": fleet.uri(),
    }));
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

/// The fleet's (host, process, thread name) rows as the processes of
/// this host's store are listed: each process with its threads, most
/// samples first. A fleet store keeps threads by name, so their `tid` is
/// 0.
fn processes(threads: &[ThreadSamples]) -> Vec<ProcessRow<'_>> {
    let mut rows: Vec<ProcessRow<'_>> = Vec::new();
    let mut at: std::collections::HashMap<(&str, u32, &str, &str), usize> = Default::default();
    for t in threads {
        let key = (
            t.host.as_str(),
            t.pid,
            t.process.as_str(),
            t.container.as_str(),
        );
        let i = *at.entry(key).or_insert_with(|| {
            rows.push(ProcessRow {
                host: &t.host,
                pid: t.pid,
                name: &t.process,
                container: &t.container,
                pod: &t.pod,
                samples: 0,
                threads: Vec::new(),
            });
            rows.len() - 1
        });
        rows[i].samples += t.samples;
        rows[i].threads.push(ThreadRow {
            tid: 0,
            name: &t.thread,
            samples: t.samples,
        });
    }
    // The threads come most sampled first; the processes are sorted here.
    rows.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then((a.host, a.pid).cmp(&(b.host, b.pid)))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(query: &str, path: &str) -> (StatusCode, String) {
        // Nothing listens on port 9 of loopback: every query is refused
        // at once.
        let fleet = FleetStore::open("clickhouse://127.0.0.1:9/sonde").unwrap();
        let r = answer(
            &fleet,
            &Prices::default(),
            &Classifier::shipped(),
            1_800_000_000,
            path,
            Some(query),
        );
        let status = r.status();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        use http_body_util::BodyExt;
        let bytes = rt.block_on(r.into_body().collect()).unwrap().to_bytes();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[test]
    fn what_the_fleet_store_cannot_do_is_a_400_that_says_so() {
        let (status, body) = ask("by=process,thread", "/api/profiles/flamegraph");
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("rooted at host only"), "{body}");
        let (status, body) = ask("focus=main", "/api/profiles/top");
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("focus applies to its flame graphs"), "{body}");
        let (status, _) = ask("range=nope", "/api/profiles/top");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, body) = ask("class=nonsense", "/api/profiles/top");
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("no such class"), "{body}");
        // One class's table is computed here, from the stacks: focus
        // applies to it.
        let (status, body) = ask("class=allocation&focus=main", "/api/profiles/top");
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    }

    #[test]
    fn a_store_that_is_down_is_a_502_naming_it() {
        for path in [
            "/api/profiles/top",
            "/api/profiles/diff",
            "/api/profiles/flamegraph",
            "/api/profiles/diff/flamegraph",
            "/api/profiles/folded",
            "/api/profiles/pprof",
            "/api/profiles/processes",
            "/api/profiles/hosts",
            "/api/profiles/classes",
            "/api/profiles/classes/diff",
        ] {
            let (status, body) = ask("focus=main&by=host", path);
            let expected = if path == "/api/profiles/top" || path == "/api/profiles/diff" {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::BAD_GATEWAY
            };
            assert_eq!(status, expected, "{path}: {body}");
            if expected == StatusCode::BAD_GATEWAY {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["store"], "clickhouse://127.0.0.1:9/sonde", "{path}");
                assert!(
                    v["error"]
                        .as_str()
                        .unwrap()
                        .starts_with("the fleet store clickhouse://127.0.0.1:9/sonde could not answer: ClickHouse at http://127.0.0.1:9"),
                    "{path}: {body}"
                );
            }
        }
        let (status, _) = ask("", "/api/profiles/top");
        assert_eq!(status, StatusCode::BAD_GATEWAY);
    }

    #[test]
    fn a_fleets_threads_group_into_processes() {
        let t = |host: &str, pid, thread: &str, samples| ThreadSamples {
            host: host.into(),
            pid,
            process: "app".into(),
            container: String::new(),
            pod: String::new(),
            thread: thread.into(),
            samples,
        };
        let rows = [
            t("web-2", 7, "worker", 50),
            t("web-1", 7, "worker", 40),
            t("web-2", 7, "main", 30),
        ];
        let p = processes(&rows);
        let shape: Vec<(&str, u64, Vec<&str>)> = p
            .iter()
            .map(|r| {
                (
                    r.host,
                    r.samples,
                    r.threads.iter().map(|t| t.name).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("web-2", 80, vec!["worker", "main"]),
                ("web-1", 40, vec!["worker"])
            ]
        );
    }
}
