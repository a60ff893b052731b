//! Which stacks a view keeps: by process id, process name, thread name,
//! container and host. The command line (`--pid`, `--thread`,
//! `--container`, `--host`) and the admin site (`pid=`, `process=`,
//! `thread=`, `container=`, `host=`) both read a profile through a
//! [`Select`].

use regex::{Regex, RegexBuilder};

use crate::model::{Process, Profile};

/// The most compiled size of a thread pattern: a pattern comes from a
/// URL as well as the command line, and must not cost the agent memory.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// What to keep; each list empty (or the pattern absent) keeps all.
#[derive(Debug, Clone, Default)]
pub struct Select {
    /// Process ids.
    pub pids: Vec<u32>,
    /// Process names (`comm`), exactly.
    pub processes: Vec<String>,
    /// Thread names: a regular expression found anywhere in the name
    /// (anchor it with `^…$` for the whole name).
    pub thread: Option<Regex>,
    /// Host names, exactly.
    pub hosts: Vec<String>,
    /// Container ids or their prefixes (`docker ps` shows 12 digits), or
    /// Kubernetes pod uids, exactly.
    pub containers: Vec<String>,
}

impl Select {
    /// Compiles a thread name pattern.
    ///
    /// # Errors
    ///
    /// A message saying what is wrong with the pattern.
    pub fn thread_pattern(pattern: &str) -> Result<Regex, String> {
        RegexBuilder::new(pattern)
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|e| format!("thread pattern {pattern:?}: {e}"))
    }

    /// Whether this keeps everything.
    pub fn is_all(&self) -> bool {
        self.pids.is_empty()
            && self.processes.is_empty()
            && self.thread.is_none()
            && self.hosts.is_empty()
            && self.containers.is_empty()
    }

    /// Whether stacks sampled in `p` are kept.
    pub fn matches(&self, p: &Process) -> bool {
        (self.pids.is_empty() || self.pids.contains(&p.pid))
            && (self.processes.is_empty() || self.processes.contains(&p.name))
            && self.thread.as_ref().is_none_or(|t| t.is_match(&p.thread))
            && (self.hosts.is_empty() || self.hosts.contains(&p.host))
            && (self.containers.is_empty()
                || self.containers.iter().any(|c| {
                    !c.is_empty()
                        && ((!p.container.is_empty() && p.container.starts_with(c.as_str()))
                            || p.pod == *c)
                }))
    }

    /// The profile with only the stacks this keeps.
    pub fn apply(&self, profile: Profile) -> Profile {
        if self.is_all() {
            profile
        } else {
            profile.filter(|p| self.matches(p))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_criterion_narrows_and_a_thread_pattern_matches_anywhere() {
        let p = Process {
            pid: 7,
            name: "java".into(),
            tid: 9,
            thread: "C2 CompilerThre".into(),
            host: "web-1".into(),
            ..Default::default()
        };
        assert!(Select::default().matches(&p));
        let thread = |s: &str| Select {
            thread: Some(Select::thread_pattern(s).unwrap()),
            ..Default::default()
        };
        assert!(thread("Compiler").matches(&p));
        assert!(thread("^C[12] ").matches(&p));
        assert!(!thread("^Compiler").matches(&p));
        assert!(!thread("^GC").matches(&p));
        let pids = Select {
            pids: vec![8],
            ..Default::default()
        };
        assert!(!pids.matches(&p));
        let hosts = Select {
            hosts: vec!["web-1".into(), "web-2".into()],
            processes: vec!["java".into()],
            ..Default::default()
        };
        assert!(hosts.matches(&p));
        let id = "4f2c0e1d9a8b".repeat(5) + "abcd";
        let uid = "1c2e77aa-0b6e-4c4e-9a8f-3d2b1c0a9e8f";
        let in_pod = Process {
            container: id.clone(),
            pod: uid.into(),
            ..p.clone()
        };
        let containers = |c: &[&str]| Select {
            containers: c.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        assert!(containers(&[&id[..12]]).matches(&in_pod));
        assert!(containers(&[&id]).matches(&in_pod));
        assert!(containers(&["ffff", uid]).matches(&in_pod));
        assert!(
            !containers(&[&uid[..8]]).matches(&in_pod),
            "a pod uid is whole"
        );
        assert!(
            !containers(&[&id[..12]]).matches(&p),
            "outside any container"
        );
        assert!(!containers(&[""]).matches(&p));
        let err = Select::thread_pattern("worker-(").unwrap_err();
        assert!(err.starts_with("thread pattern \"worker-(\": "), "{err}");
        assert!(Select::thread_pattern(&"a{1000}".repeat(100)).is_err());
    }
}
