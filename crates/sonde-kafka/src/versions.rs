//! The Kafka release a broker runs, as far as its ApiVersions answer
//! tells: each release from 0.10.0 (the first to answer ApiVersions) to
//! 4.1 raised the highest version of some API a client sends, and the
//! newest release whose raise the broker serves is its release (or the
//! first of several that no client API tells apart, such as 3.3 and 3.4).
//! [`crate::Error::Unsupported`] names it, so that "the broker serves
//! Produce versions 0 to 2" also says which Kafka that is.
//!
//! A broker can advertise less than its release serves: a 2.x broker whose
//! `log.message.format.version` is older than 0.11 leaves out the versions
//! that need record batches, and then reads as an older release here.

use std::fmt;

const PRODUCE: i16 = 0;
const FETCH: i16 = 1;
const LIST_OFFSETS: i16 = 2;
const METADATA: i16 = 3;
const OFFSET_FETCH: i16 = 9;
const JOIN_GROUP: i16 = 11;
const LIST_GROUPS: i16 = 16;
const API_VERSIONS: i16 = 18;
const ADD_PARTITIONS_TO_TXN: i16 = 24;
const DESCRIBE_ACLS: i16 = 29;

/// Kafka's releases, oldest first, each with the API version it was the
/// first to serve (`(api key, version)`), or `None` when no client API
/// tells it from the release before. The versions are those of the real
/// brokers' ApiVersions answers (the tests below hold 2.8.2's, 3.9.2's
/// and 4.1.0's).
const RELEASES: &[(&str, Option<(i16, i16)>)] = &[
    ("0.10.0", Some((API_VERSIONS, 0))),
    ("0.10.1", Some((METADATA, 2))),
    ("0.10.2", Some((OFFSET_FETCH, 2))),
    ("0.11.0", Some((PRODUCE, 3))),
    ("1.0", Some((METADATA, 5))),
    ("1.1", Some((FETCH, 7))),
    ("2.0", Some((FETCH, 8))),
    ("2.1", Some((FETCH, 10))),
    ("2.2", Some((LIST_OFFSETS, 5))),
    ("2.3", Some((FETCH, 11))),
    ("2.4", Some((PRODUCE, 8))),
    ("2.5", Some((JOIN_GROUP, 7))),
    ("2.6", Some((LIST_GROUPS, 4))),
    ("2.7", Some((FETCH, 12))),
    ("2.8", Some((PRODUCE, 9))),
    ("3.0", Some((LIST_OFFSETS, 7))),
    ("3.1", Some((FETCH, 13))),
    ("3.2", Some((JOIN_GROUP, 9))),
    ("3.3", Some((DESCRIBE_ACLS, 3))),
    // 3.4 raised only the versions of requests between brokers.
    ("3.4", None),
    ("3.5", Some((FETCH, 15))),
    ("3.6", Some((ADD_PARTITIONS_TO_TXN, 4))),
    ("3.7", Some((FETCH, 16))),
    ("3.8", Some((PRODUCE, 11))),
    ("3.9", Some((FETCH, 17))),
    ("4.0", Some((PRODUCE, 12))),
    ("4.1", Some((PRODUCE, 13))),
];

/// The releases a broker's ApiVersions answer fits: from `first` to
/// `last` (indices into the release table; `last` the newest known
/// release means "or newer"), or nothing known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release {
    range: Option<(usize, usize)>,
}

impl Release {
    /// The release of a broker whose ApiVersions answer is `apis`
    /// (`(api key, lowest version, highest version)`).
    pub fn of(apis: &[(i16, i16, i16)]) -> Release {
        // By the highest version alone: 4.0 stopped serving old ones.
        let serves =
            |(key, version): (i16, i16)| apis.iter().any(|&(k, _, max)| k == key && max >= version);
        let Some(first) = RELEASES
            .iter()
            .rposition(|(_, raise)| raise.is_some_and(serves))
        else {
            return Release { range: None };
        };
        // Up to the release before the next one that can be told apart.
        let last = RELEASES[first + 1..]
            .iter()
            .position(|(_, raise)| raise.is_some())
            .map_or(RELEASES.len() - 1, |n| first + n);
        Release {
            range: Some((first, last)),
        }
    }
}

impl fmt::Display for Release {
    /// "Kafka 3.9", "Kafka 3.3 to 3.4", "Kafka 4.1 or newer", or "an
    /// unknown Kafka release".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.range {
            None => f.write_str("an unknown Kafka release"),
            Some((first, _)) if first == RELEASES.len() - 1 => {
                write!(f, "Kafka {} or newer", RELEASES[first].0)
            }
            Some((first, last)) if first == last => write!(f, "Kafka {}", RELEASES[first].0),
            Some((first, last)) => {
                write!(f, "Kafka {} to {}", RELEASES[first].0, RELEASES[last].0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the brokers `scripts/kafka-broker.sh` starts answer to
    /// ApiVersions 0 on their client listener (4.1.0 and 3.9.2 in KRaft
    /// mode, 2.8.2 with ZooKeeper).
    #[rustfmt::skip]
    const KAFKA_4_1_0: &[(i16, i16, i16)] = &[
        (0, 0, 13), (1, 4, 18), (2, 1, 10), (3, 0, 13), (8, 2, 9), (9, 1, 9), (10, 0, 6),
        (11, 0, 9), (12, 0, 4), (13, 0, 5), (14, 0, 5), (15, 0, 6), (16, 0, 5), (17, 0, 1),
        (18, 0, 4), (19, 2, 7), (20, 1, 6), (21, 0, 2), (22, 0, 5), (23, 2, 4), (24, 0, 5),
        (25, 0, 4), (26, 0, 5), (27, 1, 1), (28, 0, 5), (29, 1, 3), (30, 1, 3), (31, 1, 3),
        (32, 1, 4), (33, 0, 2), (34, 1, 2), (35, 1, 4), (36, 0, 2), (37, 0, 3), (38, 1, 3),
        (39, 1, 2), (40, 1, 2), (41, 1, 3), (42, 0, 2), (43, 0, 2), (44, 0, 1), (45, 0, 1),
        (46, 0, 0), (47, 0, 0), (48, 0, 1), (49, 0, 1), (50, 0, 0), (51, 0, 0), (55, 0, 2),
        (57, 0, 2), (60, 0, 2), (61, 0, 0), (64, 0, 0), (65, 0, 0), (66, 0, 2), (68, 0, 1),
        (69, 0, 1), (74, 0, 1), (75, 0, 0), (76, 1, 1), (77, 1, 1), (78, 1, 1), (79, 1, 1),
        (80, 0, 0), (81, 0, 0), (83, 0, 0), (84, 0, 0), (85, 0, 0), (86, 0, 0), (87, 0, 0),
        (90, 0, 0), (91, 0, 0), (92, 0, 0),
    ];
    #[rustfmt::skip]
    const KAFKA_3_9_2: &[(i16, i16, i16)] = &[
        (0, 0, 11), (1, 0, 17), (2, 0, 9), (3, 0, 12), (8, 0, 9), (9, 0, 9), (10, 0, 6),
        (11, 0, 9), (12, 0, 4), (13, 0, 5), (14, 0, 5), (15, 0, 5), (16, 0, 5), (17, 0, 1),
        (18, 0, 4), (19, 0, 7), (20, 0, 6), (21, 0, 2), (22, 0, 5), (23, 0, 4), (24, 0, 5),
        (25, 0, 4), (26, 0, 4), (27, 0, 1), (28, 0, 4), (29, 0, 3), (30, 0, 3), (31, 0, 3),
        (32, 0, 4), (33, 0, 2), (34, 0, 2), (35, 0, 4), (36, 0, 2), (37, 0, 3), (38, 0, 3),
        (39, 0, 2), (40, 0, 2), (41, 0, 3), (42, 0, 2), (43, 0, 2), (44, 0, 1), (45, 0, 0),
        (46, 0, 0), (47, 0, 0), (48, 0, 1), (49, 0, 1), (50, 0, 0), (51, 0, 0), (55, 0, 2),
        (57, 0, 1), (60, 0, 1), (61, 0, 0), (64, 0, 0), (65, 0, 0), (66, 0, 1), (68, 0, 0),
        (69, 0, 0), (74, 0, 0), (75, 0, 0), (80, 0, 0), (81, 0, 0),
    ];
    #[rustfmt::skip]
    const KAFKA_2_8_2: &[(i16, i16, i16)] = &[
        (0, 0, 9), (1, 0, 12), (2, 0, 6), (3, 0, 11), (4, 0, 5), (5, 0, 3), (6, 0, 7),
        (7, 0, 3), (8, 0, 8), (9, 0, 7), (10, 0, 3), (11, 0, 7), (12, 0, 4), (13, 0, 4),
        (14, 0, 5), (15, 0, 5), (16, 0, 4), (17, 0, 1), (18, 0, 3), (19, 0, 7), (20, 0, 6),
        (21, 0, 2), (22, 0, 4), (23, 0, 4), (24, 0, 3), (25, 0, 3), (26, 0, 3), (27, 0, 1),
        (28, 0, 3), (29, 0, 2), (30, 0, 2), (31, 0, 2), (32, 0, 4), (33, 0, 2), (34, 0, 2),
        (35, 0, 2), (36, 0, 2), (37, 0, 3), (38, 0, 2), (39, 0, 2), (40, 0, 2), (41, 0, 2),
        (42, 0, 2), (43, 0, 2), (44, 0, 1), (45, 0, 0), (46, 0, 0), (47, 0, 0), (48, 0, 1),
        (49, 0, 1), (50, 0, 0), (51, 0, 0), (56, 0, 0), (57, 0, 0), (60, 0, 0), (61, 0, 0),
    ];

    fn named(apis: &[(i16, i16, i16)]) -> String {
        Release::of(apis).to_string()
    }

    /// `apis` with the highest version of `key` lowered to `max`.
    fn capped(apis: &[(i16, i16, i16)], key: i16, max: i16) -> Vec<(i16, i16, i16)> {
        apis.iter()
            .map(|&(k, lo, hi)| {
                if k == key {
                    (k, lo.min(max), max)
                } else {
                    (k, lo, hi)
                }
            })
            .collect()
    }

    #[test]
    fn the_real_brokers_are_named_by_their_release() {
        assert_eq!(named(KAFKA_4_1_0), "Kafka 4.1 or newer");
        assert_eq!(named(KAFKA_3_9_2), "Kafka 3.9");
        assert_eq!(named(KAFKA_2_8_2), "Kafka 2.8");
    }

    #[test]
    fn a_release_the_table_cannot_tell_from_the_next_is_a_range() {
        // 3.3 and 3.4 serve the same client versions; 3.5 raised Fetch to 15.
        let v3_4 = capped(&capped(&capped(KAFKA_3_9_2, FETCH, 13), PRODUCE, 9), 24, 3);
        assert_eq!(named(&v3_4), "Kafka 3.3 to 3.4");
    }

    #[test]
    fn older_brokers_are_named_by_the_versions_they_lack() {
        // 4.1 without Produce 13 is 4.0; 2.8 without Produce 9 is 2.7.
        assert_eq!(named(&capped(KAFKA_4_1_0, PRODUCE, 12)), "Kafka 4.0");
        assert_eq!(named(&capped(KAFKA_2_8_2, PRODUCE, 8)), "Kafka 2.7");
        // Kafka 0.10.2's answer: no record batches (Produce 3) yet.
        #[rustfmt::skip]
        let v0_10_2 = [
            (0, 0, 2), (1, 0, 3), (2, 0, 1), (3, 0, 2), (8, 0, 2), (9, 0, 2), (10, 0, 0),
            (11, 0, 1), (17, 0, 0), (18, 0, 0), (19, 0, 1), (20, 0, 0),
        ];
        assert_eq!(named(&v0_10_2), "Kafka 0.10.2");
        // 0.10.0 answers ApiVersions and nothing newer.
        assert_eq!(named(&[(0, 0, 2), (3, 0, 1), (18, 0, 0)]), "Kafka 0.10.0");
        assert_eq!(named(&[]), "an unknown Kafka release");
    }

    #[test]
    fn every_release_but_the_first_is_told_by_a_raise_newer_than_the_last() {
        let mut last: std::collections::BTreeMap<i16, i16> = Default::default();
        for (name, raise) in RELEASES {
            if let Some((key, version)) = raise {
                if let Some(&before) = last.get(key) {
                    assert!(*version > before, "{name} repeats a raise of API {key}");
                }
                last.insert(*key, *version);
            }
        }
    }
}
