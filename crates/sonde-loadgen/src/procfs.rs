//! What `/proc` tells about the agent and the kernel's UDP drops.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// CPU seconds (user + system) of a process.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may contain spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks)
}

/// Peak resident memory (`VmHWM`) of a process, in bytes.
pub fn peak_rss(pid: u32) -> Option<u64> {
    status_kb(pid, "VmHWM:")
}

/// Current resident memory (`VmRSS`) of a process, in bytes.
pub fn rss(pid: u32) -> Option<u64> {
    status_kb(pid, "VmRSS:")
}

fn status_kb(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// UDP receive-buffer drops since boot (`RcvbufErrors` in `/proc/net/snmp`).
pub fn udp_rcvbuf_errors() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut lines = s.lines().filter(|l| l.starts_with("Udp:"));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    let i = names.iter().position(|n| *n == "RcvbufErrors")?;
    values.get(i)?.parse().ok()
}

/// Bytes queued on the UDP socket bound to `port` (`rx_queue` in `/proc/net/udp`).
pub fn udp_queue(port: u16) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/udp").ok()?;
    let want = format!(":{port:04X}");
    s.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1)?.ends_with(&want) {
            let (_, rx) = f.get(4)?.split_once(':')?;
            u64::from_str_radix(rx, 16).ok()
        } else {
            None
        }
    })
}

/// The inode of the UDP socket bound to `port` (from `/proc/net/udp`).
fn udp_inode(port: u16) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/udp").ok()?;
    let want = format!(":{port:04X}");
    s.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // Bound sockets have no remote address (`00000000:0000`).
        (f.get(1)?.ends_with(&want) && f.get(2)?.ends_with(":0000"))
            .then(|| f.get(9)?.parse().ok())?
    })
}

/// The inode of the unix socket bound to `path` (from `/proc/net/unix`).
fn unix_inode(path: &std::path::Path) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/unix").ok()?;
    let want = path.to_str()?;
    s.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(7) == Some(&want)).then(|| f.get(6)?.parse().ok())?
    })
}

/// The process holding the socket with `inode` open.
fn owner_of(inode: u64) -> Option<u32> {
    let want = format!("socket:[{inode}]");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()) {
                return Some(pid);
            }
        }
    }
    None
}

/// The process that receives on UDP `port`: the agent (or peer) under test.
pub fn udp_owner(port: u16) -> Option<u32> {
    owner_of(udp_inode(port)?)
}

/// The process that receives on the unix socket at `path`.
pub fn unix_owner(path: &std::path::Path) -> Option<u32> {
    owner_of(unix_inode(path)?)
}

/// Sums every sample of `metric` (all label sets) on an agent's `/metrics`.
pub fn scrape_sum(admin: SocketAddr, metric: &str) -> Option<f64> {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: sonde\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    sum_of(&body, metric)
}

/// Sums every sample of `metric` (all label sets) in a Prometheus text
/// exposition.
pub fn sum_of(body: &str, metric: &str) -> Option<f64> {
    let prefix_labels = format!("{metric}{{");
    let prefix_plain = format!("{metric} ");
    let mut sum = 0.0;
    let mut found = false;
    for l in body.lines() {
        if l.starts_with(&prefix_labels) || l.starts_with(&prefix_plain) {
            if let Some(v) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
                sum += v;
                found = true;
            }
        }
    }
    found.then_some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_and_memory() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some());
        assert!(peak_rss(me).unwrap() >= rss(me).unwrap() / 2);
        assert!(rss(me).unwrap() > 1024 * 1024);
    }

    #[test]
    fn a_bound_udp_socket_shows_its_queue() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = sock.local_addr().unwrap().port();
        assert_eq!(udp_queue(port), Some(0));
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .send_to(&[0u8; 100], ("127.0.0.1", port))
            .unwrap();
        assert!(udp_queue(port).unwrap() > 0);
        assert!(udp_rcvbuf_errors().is_some());
        assert_eq!(udp_owner(port), Some(std::process::id()));
    }

    #[test]
    fn a_bound_unix_socket_has_an_owner() {
        let dir = std::env::temp_dir().join(format!("sonde-loadgen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        assert_eq!(unix_owner(&path), Some(std::process::id()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
