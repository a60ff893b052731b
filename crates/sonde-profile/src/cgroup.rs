//! Which container and which Kubernetes pod a process runs in, read from
//! the cgroup paths of its `/proc/PID/cgroup`.

/// The container id in a process's `/proc/PID/cgroup`: the last run of
/// 64 hexadecimal digits in a cgroup path, which is how Docker, containerd,
/// CRI-O and Podman name a container's cgroup under both cgroup drivers
/// (`/docker/ID`, `/system.slice/docker-ID.scope`,
/// `/kubepods.slice/…/cri-containerd-ID.scope`, `/kubepods/burstable/podUID/ID`,
/// `…/crio-ID.scope`, `…/libpod-ID.scope`). The unified (v2) line is read
/// first; `None` for a process in no container.
pub fn container_of_cgroup(text: &str) -> Option<String> {
    let id_in = |path: &str| {
        path.rsplit(['/', '-', '.', ':'])
            .find(|part| part.len() == 64 && part.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_ascii_lowercase)
    };
    in_cgroup_paths(text, id_in)
}

/// The first path of `/proc/PID/cgroup` in which `find` finds something,
/// the unified (v2) line's first, then every hierarchy's in order.
fn in_cgroup_paths(text: &str, find: impl Fn(&str) -> Option<String>) -> Option<String> {
    let unified = text
        .lines()
        .filter(|l| l.starts_with("0::"))
        .find_map(|l| find(&l[3..]));
    unified.or_else(|| {
        text.lines()
            .filter_map(|l| l.splitn(3, ':').nth(2))
            .find_map(&find)
    })
}

/// The uid of the Kubernetes pod in a process's `/proc/PID/cgroup`: a
/// path component `pod<uid>` (the cgroupfs driver,
/// `/kubepods/burstable/pod1f4f…/<container>`) or `…-pod<uid>.slice` with
/// the uid's dashes written as underscores (the systemd driver,
/// `kubepods-burstable-pod1f4f_….slice`), given with dashes. The unified
/// (v2) line is read first; `None` outside a pod.
pub fn pod_of_cgroup(text: &str) -> Option<String> {
    fn uid_in(path: &str) -> Option<String> {
        // `kubepods` has a "pod" of its own: every one is tried.
        path.split('/')
            .flat_map(|part| part.match_indices("pod").map(move |(at, _)| (part, at + 3)))
            .find_map(|(part, at)| {
                let uid = part.get(at..at + 36)?;
                let ok = uid.bytes().enumerate().all(|(i, b)| match i {
                    8 | 13 | 18 | 23 => b == b'-' || b == b'_',
                    _ => b.is_ascii_hexdigit(),
                });
                ok.then(|| uid.replace('_', "-").to_ascii_lowercase())
            })
    }
    in_cgroup_paths(text, uid_in)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_are_found_in_the_cgroup_paths_of_each_runtime() {
        let id = "4f2c0e1d9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d";
        for path in [
            format!("/docker/{id}"),
            format!("/system.slice/docker-{id}.scope"),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1c2e_77aa.slice/cri-containerd-{id}.scope"),
            format!("/kubepods/burstable/pod1c2e77aa-0b6e-4c4e-9a8f-3d2b1c0a9e8f/{id}"),
            format!("/kubepods.slice/kubepods-pod1.slice/crio-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
        ] {
            let text = format!("0::{path}\n");
            assert_eq!(container_of_cgroup(&text).as_deref(), Some(id), "{path}");
        }
        // cgroup v1: the id from any hierarchy's line.
        let v1 = format!("12:pids:/docker/{id}\n1:name=systemd:/docker/{id}\n0::/\n");
        assert_eq!(container_of_cgroup(&v1).as_deref(), Some(id));
        for none in [
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/\n",
            "0::/system.slice/sonde.service\n",
            "",
            "garbage",
        ] {
            assert_eq!(container_of_cgroup(none), None, "{none:?}");
        }
    }

    #[test]
    fn pod_uids_are_found_in_the_cgroup_paths_of_both_drivers() {
        let uid = "1c2e77aa-0b6e-4c4e-9a8f-3d2b1c0a9e8f";
        let id = "4f2c0e1d9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d";
        for path in [
            format!("/kubepods/burstable/pod{uid}/{id}"),
            format!("/kubepods/pod{uid}/{id}"),
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id}.scope",
                uid.replace('-', "_")
            ),
            format!(
                "/kubepods.slice/kubepods-pod{}.slice/crio-{id}.scope",
                uid.to_uppercase().replace('-', "_")
            ),
        ] {
            assert_eq!(pod_of_cgroup(&format!("0::{path}\n")).as_deref(), Some(uid), "{path}");
        }
        let v1 = format!("12:pids:/kubepods/besteffort/pod{uid}/{id}\n0::/\n");
        assert_eq!(pod_of_cgroup(&v1).as_deref(), Some(uid));
        for none in [
            format!("0::/docker/{id}\n"),
            "0::/kubepods.slice/kubepods-pod1.slice/x.scope\n".to_owned(),
            "0::/system.slice/podman.service\n".to_owned(),
            String::new(),
        ] {
            assert_eq!(pod_of_cgroup(&none), None, "{none:?}");
        }
    }
}
