//! What a valid config needs of the host it runs on: the users and groups
//! it names, and the directories and files it writes.
//!
//! [`check_host`] runs after [`super::parse`], on `sonde validate` and on
//! every start and reload (through the same loader), so that a config
//! that cannot start says so before it starts, with the key, its line and
//! the fix. It reads the user and group databases and looks at paths; it
//! changes nothing.
//!
//! # Design
//!
//! It is a step of its own rather than a part of [`super::parse`], which
//! stays pure: the unit tests, the doc examples and the fuzz target parse
//! configs written for other hosts (a group `metrics`, a data directory
//! under `/var/lib`), which are valid configs that this host merely cannot
//! run.
//!
//! Whether a directory is writable is asked as the user running the check
//! (`faccessat` with `AT_EACCESS`): run `sonde validate` as the user the
//! agent runs as (the packaged unit's `ExecStartPre=` does), or as root.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use super::{Config, ConfigError};
use sonde_config::DATA_DIR_FIX;
use sonde_sinks::registry::Buffer;

/// Checks what `config` needs of this host; see the module docs.
///
/// # Errors
///
/// The first problem, as a [`ConfigError`] naming the key, its line and
/// the fix: a unix socket's `owner` or `group` that does not exist; a
/// unix socket whose path is taken by something other than a socket; an
/// `agent.admin_socket_group` that does not exist, or an admin socket
/// file whose path is taken by another file or whose directory exists
/// and cannot be written; a file sink's `path` that cannot be opened for
/// writing; an `agent.data_dir` that
/// cannot be made or written, when a disk buffer, a log source or the
/// profiler keeps data there; an `agent.admin_tls` whose files cannot be
/// read, are not a PEM certificate chain and a private key, or hold a key
/// of another certificate, and a `ca_file` that holds no certificate;
/// what each sink type's own host check finds (a kafka sink's `tls` and
/// `sasl` files).
pub fn check_host(config: &Config) -> Result<(), ConfigError> {
    for (i, r) in config.receivers.iter().enumerate() {
        if let Some(o) = &r.owner {
            sonde_runtime::socket::user_id(o).map_err(|e| {
                config.error(
                    format!("receivers[{i}].owner"),
                    lookup_problem(e, "user", o),
                    "write a user of this host (`getent passwd` lists them) or a numeric uid, or remove `owner` for the agent's own user",
                )
            })?;
        }
        if let Some(g) = &r.group {
            sonde_runtime::socket::group_id(g).map_err(|e| {
                config.error(
                    format!("receivers[{i}].group"),
                    lookup_problem(e, "group", g),
                    format!("create it (`groupadd {g}`), write a group of this host (`getent group` lists them) or a numeric gid, or remove `group` for the agent's own group"),
                )
            })?;
        }
        if let Some(path) = r.listen.unix_path() {
            // The socket file's directory is not checked: a service manager
            // makes it as the agent starts (systemd's RuntimeDirectory=, a
            // Kubernetes hostPath), after a check run at deploy time.
            match std::fs::symlink_metadata(path) {
                Ok(m) if !m.file_type().is_socket() => {
                    return Err(config.error(
                        format!("receivers[{i}].listen"),
                        format!("{} exists and is not a socket", path.display()),
                        "listen on a path of its own: the agent replaces a stale socket file there, never another file",
                    ));
                }
                _ => {}
            }
        }
    }
    for (i, s) in config.sinks.iter().enumerate() {
        if let Some(host) = s.kind.host {
            host(s).map_err(|e| config.error(format!("sinks[{i}].{}", e.key), e.problem, e.fix))?;
        }
    }
    for (i, s) in config.sinks.iter().enumerate() {
        let Some(path) = sonde_sinks::file::path(s) else {
            continue;
        };
        let path = path.as_path();
        let problem = match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Some(format!("{} is a directory", path.display())),
            Ok(_) => writable(path)
                .err()
                .map(|e| format!("{} cannot be written: {e}", path.display())),
            Err(_) => writable_dir(parent(path))
                .err()
                .map(|e| format!("cannot make {}: {e}", path.display())),
        };
        if let Some(problem) = problem {
            return Err(config.error(format!("sinks[{i}].path"), problem, sonde_sinks::file::FIX));
        }
    }
    if let Some(path) = config.agent.admin_socket() {
        check_admin_socket(config, path)?;
    }
    if config.agent.admin_auth == super::AdminAuth::Token {
        if let Some(g) = &config.agent.admin_token_group {
            let g = g.get_ref();
            sonde_runtime::socket::group_id(g).map_err(|e| {
                config.error(
                    "agent.admin_token_group",
                    lookup_problem(e, "group", g),
                    format!("create it (`groupadd {g}`), or name a group of this host (`getent group` lists them)"),
                )
            })?;
        }
        if let Some(file) = &config.agent.admin_token_file {
            let problem = match std::fs::metadata(file) {
                Ok(_) => std::fs::File::open(file)
                    .err()
                    .map(|e| format!("{} cannot be read: {e}", file.display())),
                Err(_) => makeable_dir(parent(file))
                    .err()
                    .map(|e| format!("cannot make {}: {e}", file.display())),
            };
            if let Some(problem) = problem {
                return Err(config.error(
                    "agent.admin_token_file",
                    problem,
                    "run sonde as the file's owner, or set agent.admin_token_file to a path it can write",
                ));
            }
        }
    }
    if let Some(tls) = &config.agent.admin_tls {
        sonde_admin::http::Tls::load(tls.cert_file.get_ref(), tls.key_file.get_ref())
            .map_err(|e| admin_tls_error(config, &e))?;
        if let Some(ca) = &tls.ca_file {
            sonde_admin::http::certificates(ca.get_ref()).map_err(|e| {
                config.error_at(
                    ca.span(),
                    "agent.admin_tls.ca_file",
                    e.to_string(),
                    "write the path of the PEM certificates of the CA that issued cert_file's certificate, or remove ca_file to trust the system's CAs and cert_file's own certificates",
                )
            })?;
        }
    }
    let uses = data_dir_uses(config);
    if !uses.is_empty() {
        let dir = &config.agent.data_dir;
        if let Err(problem) = makeable_dir(dir) {
            return Err(config.error(
                "agent.data_dir",
                format!(
                    "{} (where {} keep their data): {problem}",
                    dir.display(),
                    uses.join(", ")
                ),
                DATA_DIR_FIX,
            ));
        }
    }
    Ok(())
}

/// The admin site's socket file at `path`: its group exists, the path is
/// free or a socket (a stale one is replaced at start), and its directory,
/// if it exists, may be written.
fn check_admin_socket(config: &Config, path: &Path) -> Result<(), ConfigError> {
    if let Some(g) = &config.agent.admin_socket_group {
        let g = g.get_ref();
        sonde_runtime::socket::group_id(g).map_err(|e| {
            config.error(
                "agent.admin_socket_group",
                lookup_problem(e, "group", g),
                format!("create it (`groupadd {g}`), write a group of this host (`getent group` lists them) or a numeric gid, or remove admin_socket_group for the agent's own group"),
            )
        })?;
    }
    let fix = "listen on a path of its own in a directory the user sonde runs as can write (systemd's RuntimeDirectory=sonde makes /run/sonde): the agent replaces a stale socket file there, never another file";
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(config.error(
                "agent.admin_listen",
                format!("{} exists and is not a socket", path.display()),
                fix,
            ));
        }
        _ => {}
    }
    // A directory that does not exist yet passes, as for receivers: a
    // service manager makes it as the agent starts, after a check run at
    // deploy time; one that exists must take the file.
    let dir = parent(path);
    if dir.exists() {
        if let Err(problem) = writable_dir(dir) {
            return Err(config.error(
                "agent.admin_listen",
                format!(
                    "cannot make the socket file {}: {} is {problem}",
                    path.display(),
                    dir.display()
                ),
                fix,
            ));
        }
    }
    Ok(())
}

/// A certificate or key of `agent.admin_tls` that cannot be served, named
/// by the key of the file at fault and its line.
pub fn admin_tls_error(config: &Config, e: &sonde_admin::http::TlsError) -> ConfigError {
    use sonde_admin::http::{TlsError, TlsFile};
    let Some(tls) = &config.agent.admin_tls else {
        return config.error("agent.admin_tls", e.to_string(), "");
    };
    let (key, span) = match e.file() {
        TlsFile::Cert => ("agent.admin_tls.cert_file", tls.cert_file.span()),
        TlsFile::Key => ("agent.admin_tls.key_file", tls.key_file.span()),
    };
    let fix = match e {
        TlsError::Read { .. } => {
            "make the file readable by the user sonde runs as (e.g. `chgrp sonde FILE && chmod 0640 FILE`), or correct the path"
        }
        TlsError::Pem { .. } | TlsError::NoCertificate { .. } | TlsError::Certificate { .. } => {
            "write the path of a PEM certificate chain, the site's own certificate first (`openssl x509 -in FILE -noout -text` shows it)"
        }
        TlsError::NoKey { .. } | TlsError::Key { .. } => {
            "write the path of the unencrypted PEM private key (RSA, ECDSA or Ed25519) of cert_file's first certificate"
        }
        TlsError::Mismatch { .. } => {
            "write the key the certificate was issued for: `openssl x509 -in CERT_FILE -noout -pubkey` and `openssl pkey -in KEY_FILE -pubout` print the same key when they match"
        }
    };
    config.error_at(span, key, e.to_string(), fix)
}

/// What keeps data under `agent.data_dir`, for messages; empty when
/// nothing does (the directory is then never made).
fn data_dir_uses(config: &Config) -> Vec<&'static str> {
    let mut uses = Vec::new();
    if config
        .sinks
        .iter()
        .any(|s| matches!(s.net.as_ref().map(|n| &n.buffer), Some(Buffer::Disk { .. })))
    {
        uses.push("disk buffers");
    }
    if !config.logs.is_empty() {
        uses.push("log checkpoints");
    }
    if config.profiler.is_some() {
        uses.push("profiles");
    }
    if config.agent.admin_auth == super::AdminAuth::Token && config.agent.admin_token_file.is_none()
    {
        uses.push("the admin token");
    }
    uses
}

/// The problem of a user or group lookup: no such name, or the database
/// could not be read.
fn lookup_problem(e: io::Error, what: &str, name: &str) -> String {
    if e.kind() == io::ErrorKind::NotFound {
        format!("no {what} {name:?} on this host")
    } else {
        e.to_string()
    }
}

/// The directory a path is in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Ok when `dir` is a directory this user may create files in.
fn writable_dir(dir: &Path) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => writable(dir).map_err(|e| format!("not writable: {e}")),
        Ok(_) => Err("not a directory".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Ok when `dir` is a writable directory, or can be made: its nearest
/// existing ancestor is a directory this user may create in.
fn makeable_dir(dir: &Path) -> Result<(), String> {
    let mut at = dir;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => {
                return writable(at).map_err(|e| {
                    if at == dir {
                        format!("not writable: {e}")
                    } else {
                        format!("cannot be made in {}: {e}", at.display())
                    }
                });
            }
            Ok(_) if at == dir => return Err("not a directory".into()),
            Ok(_) => return Err(format!("cannot be made: {} is a file", at.display())),
            // Not there, or under a file: look further up.
            Err(e)
                if !matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Err(format!("cannot look at {}: {e}", at.display()))
            }
            Err(_) => match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => return Err("does not exist".into()),
            },
        }
    }
}

/// Whether this process (its effective user and groups) may write `path`.
fn writable(path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call;
    // faccessat only reads it.
    let rc = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    /// `text` parsed, then checked against this host.
    fn host_err(text: &str) -> ConfigError {
        let c = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        match check_host(&c) {
            Ok(()) => panic!("accepted on this host:\n{text}"),
            Err(e) => e,
        }
    }

    fn unix(dir: &Path, extra: &str) -> String {
        format!(
            "[[receivers]]\nprotocol = \"msgpack\"\nlisten = \"unixgram://{}/m.sock\"\n{extra}[[sinks]]\ntype = \"console\"\n",
            dir.display()
        )
    }

    #[test]
    fn a_socket_group_or_owner_that_does_not_exist_names_the_key_the_line_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let e = host_err(&unix(
            dir.path(),
            "mode = \"0660\"\ngroup = \"sonde-no-such-group\"\n",
        ));
        assert_eq!((e.key.as_str(), e.line), ("receivers[0].group", Some(5)));
        assert!(
            e.problem.contains("no group \"sonde-no-such-group\""),
            "{e}"
        );
        assert!(e.fix.contains("groupadd sonde-no-such-group"), "{e}");
        let e = host_err(&unix(dir.path(), "owner = \"sonde-no-such-user\"\n"));
        assert_eq!((e.key.as_str(), e.line), ("receivers[0].owner", Some(4)));
        assert!(e.problem.contains("no user"), "{e}");
        // Names every host has, and numbers, pass.
        let c = parse(&unix(dir.path(), "owner = \"root\"\ngroup = \"0\"\n")).unwrap();
        check_host(&c).unwrap();
    }

    #[test]
    fn a_socket_on_a_file_that_is_not_a_socket_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // A directory that does not exist yet is the service manager's
        // to make.
        check_host(&parse(&unix(&dir.path().join("missing"), "")).unwrap()).unwrap();
        std::fs::write(dir.path().join("m.sock"), "x").unwrap();
        let e = host_err(&unix(dir.path(), ""));
        assert_eq!((e.key.as_str(), e.line), ("receivers[0].listen", Some(3)));
        assert!(e.problem.contains("is not a socket"), "{e}");
    }

    #[test]
    fn an_admin_socket_needs_its_group_a_free_path_and_a_directory_that_takes_it() {
        let dir = tempfile::tempdir().unwrap();
        let admin = |path: &Path, extra: &str| {
            format!(
                "[agent]\nadmin_listen = \"unix://{}\"\n{extra}[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n[[sinks]]\ntype = \"console\"\n",
                path.display()
            )
        };
        let sock = dir.path().join("admin.sock");
        check_host(&parse(&admin(&sock, "admin_socket_group = \"0\"\n")).unwrap()).unwrap();
        // A directory the service manager makes as the agent starts.
        check_host(&parse(&admin(&dir.path().join("run/admin.sock"), "")).unwrap()).unwrap();

        let e = host_err(&admin(
            &sock,
            "admin_socket_group = \"sonde-no-such-group\"\n",
        ));
        assert_eq!(
            (e.key.as_str(), e.line),
            ("agent.admin_socket_group", Some(3))
        );
        assert!(
            e.problem.contains("no group \"sonde-no-such-group\""),
            "{e}"
        );
        assert!(e.fix.contains("groupadd sonde-no-such-group"), "{e}");

        std::fs::write(&sock, "x").unwrap();
        let e = host_err(&admin(&sock, ""));
        assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(2)));
        assert!(
            e.problem.ends_with("admin.sock exists and is not a socket"),
            "{e}"
        );
        assert!(e.fix.contains("RuntimeDirectory=sonde"), "{e}");
        // A stale socket is the agent's to replace.
        std::fs::remove_file(&sock).unwrap();
        drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        check_host(&parse(&admin(&sock, "")).unwrap()).unwrap();

        let e = host_err(&admin(&dir.path().join("admin.sock/admin.sock"), ""));
        assert_eq!((e.key.as_str(), e.line), ("agent.admin_listen", Some(2)));
        assert!(e.problem.contains("cannot make the socket file"), "{e}");
        assert!(e.problem.ends_with("is not a directory"), "{e}");
    }

    #[test]
    fn a_data_dir_that_cannot_be_made_is_refused_only_when_something_uses_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let agent = format!("[agent]\ndata_dir = \"{}/sub\"\n", file.display());
        let receiver = "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n";
        // Nothing keeps data there: the directory is never made.
        let c = parse(&format!("{agent}{receiver}[[sinks]]\ntype = \"console\"\n")).unwrap();
        check_host(&c).unwrap();
        let e = host_err(&format!(
            "{agent}{receiver}[[sinks]]\ntype = \"tcp\"\naddress = \"127.0.0.1:1\"\nbuffer = {{ type = \"disk\" }}\n"
        ));
        assert_eq!((e.key.as_str(), e.line), ("agent.data_dir", Some(2)));
        assert!(e.problem.contains("disk buffers"), "{e}");
        assert!(e.problem.contains("is a file"), "{e}");
        assert_eq!(e.fix, DATA_DIR_FIX);
        let e = host_err(&format!(
            "{agent}[[logs]]\nname = \"app\"\ninclude = [\"/var/log/app/*.log\"]\n[[sinks]]\ntype = \"console\"\ninputs = [\"app\"]\n"
        ));
        assert_eq!((e.key.as_str(), e.line), ("agent.data_dir", Some(2)));
        assert!(e.problem.contains("log checkpoints"), "{e}");
        // A directory that does not exist yet, under one that does, is
        // made at start.
        let c = parse(&format!(
            "[agent]\ndata_dir = \"{}/a/b\"\n[profiler]\n",
            dir.path().display()
        ))
        .unwrap();
        check_host(&c).unwrap();
    }

    /// A config whose admin site other hosts reach over TLS with `tls`
    /// as the table's keys (line 5).
    fn tls_config(tls: &str) -> String {
        format!(
            "[agent]\nallow_non_loopback = true\nadmin_listen = \"0.0.0.0:8686\"\nadmin_auth = \"token\"\nadmin_tls = {{ {tls} }}\n[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n[[sinks]]\ntype = \"console\"\n"
        )
    }

    #[test]
    fn a_kafka_sinks_tls_and_sasl_files_are_read_and_named_at_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let config = |keys: &str| {
            format!("[[logs]]\nname = \"app\"\ninclude = [\"/var/log/app.log\"]\n[[sinks]]\ntype = \"kafka\"\ninputs = [\"app\"]\nbrokers = [\"127.0.0.1:9093\"]\ntopic = \"logs\"\n{keys}")
        };
        // The parse alone does not read the files.
        let c = parse(&config(&format!("tls = {{ ca_file = {missing:?} }}\n"))).unwrap();
        let e = check_host(&c).unwrap_err();
        assert_eq!((e.key.as_str(), e.line), ("sinks[0].tls.ca_file", Some(9)));
        assert!(e.problem.contains("missing.pem"), "{e}");
        let c = parse(&config(&format!(
            "sasl = {{ mechanism = \"PLAIN\", username = \"u\", password_file = {missing:?} }}\n"
        )))
        .unwrap();
        let e = check_host(&c).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.line),
            ("sinks[0].sasl.password_file", Some(9))
        );
        // A variable is the agent's to read, not validate's.
        let c = parse(&config(
            "sasl = { mechanism = \"PLAIN\", username = \"u\", password_env = \"SONDE_NO_SUCH_VAR\" }\n",
        ))
        .unwrap();
        check_host(&c).unwrap();
    }

    #[test]
    fn admin_tls_files_must_load_as_a_chain_and_its_own_key() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let pair = || rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let (one, two) = (pair(), pair());
        let cert = write("cert.pem", &one.cert.pem());
        let key = write("key.pem", &one.signing_key.serialize_pem());
        let other_key = write("other.pem", &two.signing_key.serialize_pem());
        let files = |c: &str, k: &str| format!("cert_file = \"{c}\", key_file = \"{k}\"");
        check_host(&parse(&tls_config(&files(&cert, &key))).unwrap()).unwrap();

        let missing = dir.path().join("missing.pem").display().to_string();
        let e = host_err(&tls_config(&files(&missing, &key)));
        assert_eq!(
            (e.key.as_str(), e.line),
            ("agent.admin_tls.cert_file", Some(5))
        );
        assert!(
            e.problem.contains("cannot read") && e.problem.contains("missing.pem"),
            "{e}"
        );
        assert!(e.fix.contains("readable by the user sonde runs as"), "{e}");

        let e = host_err(&tls_config(&files(&cert, &other_key)));
        assert_eq!(
            (e.key.as_str(), e.line),
            ("agent.admin_tls.key_file", Some(5))
        );
        assert!(
            e.problem
                .contains("does not belong to the first certificate"),
            "{e}"
        );
        assert!(e.fix.contains("openssl pkey"), "{e}");

        let e = host_err(&tls_config(&files(&key, &key)));
        assert_eq!(
            (e.key.as_str(), e.line),
            ("agent.admin_tls.cert_file", Some(5))
        );
        assert!(e.problem.contains("holds no certificate"), "{e}");

        // The table's own lines, and a ca_file that is not one.
        let e = host_err(&tls_config(&files(&cert, &key)).replace(
            "admin_tls = { ",
            &format!("admin_tls = {{ ca_file = \"{key}\", "),
        ));
        assert_eq!(
            (e.key.as_str(), e.line),
            ("agent.admin_tls.ca_file", Some(5))
        );
        let text = tls_config(&files(&cert, &key))
            .replace(&format!("admin_tls = {{ {} }}\n", files(&cert, &key)), "")
            + &format!("[agent.admin_tls]\ncert_file = \"{cert}\"\nkey_file = \"{other_key}\"\n");
        let e = host_err(&text);
        assert_eq!(
            (e.key.as_str(), e.line),
            ("agent.admin_tls.key_file", Some(12))
        );
    }

    #[test]
    fn a_file_sink_path_must_be_a_file_in_a_directory_that_exists() {
        let dir = tempfile::tempdir().unwrap();
        let sink = |path: &Path| {
            format!(
                "[[receivers]]\nprotocol = \"statsd\"\nlisten = \"udp://127.0.0.1:8125\"\n[[sinks]]\ntype = \"file\"\npath = \"{}\"\n",
                path.display()
            )
        };
        let e = host_err(&sink(&dir.path().join("missing/points.jsonl")));
        assert_eq!((e.key.as_str(), e.line), ("sinks[0].path", Some(6)));
        assert!(e.fix.contains("writable"), "{e}");
        let e = host_err(&sink(dir.path()));
        assert!(e.problem.contains("is a directory"), "{e}");
        check_host(&parse(&sink(&dir.path().join("points.jsonl"))).unwrap()).unwrap();
    }
}
