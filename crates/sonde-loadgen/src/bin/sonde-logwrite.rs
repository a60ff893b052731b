//! Writes numbered log lines into rotating files and prints, as JSON, how
//! many lines each file got (the input of `sonde-logcheck --expect`).
//!
//! ```text
//! sonde-logwrite --dir /tmp/load --files 4 --line-bytes 150 --total 1GiB \
//!     --rotate rename --rotate-bytes 64MiB --keep 5 > summary.json
//! ```
//!
//! SIGINT or SIGTERM stop the run between two writes; the summary is still
//! printed and counts exactly the lines written.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Parser;
use sonde_loadgen::logs::{self, Amount, Rotate, Wrap, WritePlan};

#[derive(Parser)]
#[command(
    name = "sonde-logwrite",
    about = "Write numbered log lines (f=<file> s=<seq> filler) into rotating files"
)]
struct Args {
    /// Directory for `app-<i>.log` (created if missing; the files must be
    /// absent or empty).
    #[arg(long)]
    dir: PathBuf,
    /// Number of files.
    #[arg(long, default_value_t = 4)]
    files: u32,
    /// Line length, newline included.
    #[arg(long, default_value = "150", value_parser = logs::parse_bytes)]
    line_bytes: u64,
    /// Bytes to write over all files (e.g. 1GiB).
    #[arg(long, value_parser = logs::parse_bytes, conflicts_with = "lines")]
    total: Option<u64>,
    /// Lines to write to every file, instead of --total.
    #[arg(long)]
    lines: Option<u64>,
    /// Bytes per second over all files (e.g. 20MB); flat out without.
    #[arg(long, value_parser = logs::parse_bytes)]
    rate: Option<u64>,
    /// Rotation: none, rename or copytruncate.
    #[arg(long, default_value = "none")]
    rotate: Rotate,
    /// Rotate a file once it holds this many bytes.
    #[arg(long, default_value = "64MiB", value_parser = logs::parse_bytes)]
    rotate_bytes: u64,
    /// Rotated generations kept (`app-<i>.log.1` to `.<keep>`).
    #[arg(long, default_value_t = 5)]
    keep: u32,
    /// With copytruncate: how long to write nothing before each copy, so
    /// that a shipper catches up (lines it has not read at the truncation
    /// are only in the copy).
    #[arg(long, default_value = "0s", value_parser = logs::parse_duration)]
    copytruncate_pause: std::time::Duration,
    /// Bytes per write call.
    #[arg(long, default_value = "1MiB", value_parser = logs::parse_bytes)]
    chunk_bytes: u64,
    /// Also write the JSON summary to this file.
    #[arg(long)]
    summary: Option<PathBuf>,
    /// How lines are written: `lines`, or `cri` (each line a container
    /// runtime's whole stdout piece, its prefix counted in --line-bytes).
    #[arg(long, default_value = "lines")]
    format: Wrap,
}

fn main() {
    let args = Args::parse();
    let amount = match (args.total, args.lines) {
        (Some(t), None) => Amount::TotalBytes(t),
        (None, Some(n)) => Amount::LinesPerFile(n),
        _ => {
            eprintln!("sonde-logwrite: give --total BYTES or --lines PER_FILE");
            std::process::exit(2);
        }
    };
    if args.line_bytes == 0 || args.chunk_bytes == 0 || args.rotate_bytes == 0 {
        eprintln!("sonde-logwrite: --line-bytes, --chunk-bytes and --rotate-bytes must be above 0");
        std::process::exit(2);
    }
    let plan = WritePlan {
        dir: args.dir,
        files: args.files,
        line_bytes: args.line_bytes as usize,
        amount,
        rate: args.rate.filter(|&r| r > 0),
        rotate: args.rotate,
        rotate_bytes: args.rotate_bytes,
        keep: args.keep,
        chunk_bytes: args.chunk_bytes as usize,
        copytruncate_pause: args.copytruncate_pause,
        wrap: args.format,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("sonde-logwrite: cannot handle signal {sig}: {e}");
            std::process::exit(2);
        }
    }
    let summary = match logs::write(&plan, &stop) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sonde-logwrite: {e}");
            std::process::exit(1);
        }
    };
    let json = serde_json::to_string_pretty(&summary).expect("a summary serialises");
    if let Some(path) = &args.summary {
        if let Err(e) = std::fs::write(path, format!("{json}\n")) {
            eprintln!("sonde-logwrite: writing {}: {e}", path.display());
            std::process::exit(1);
        }
    }
    println!("{json}");
    eprintln!(
        "sonde-logwrite: {} lines, {:.1} MB in {:.2} s: {:.0} MB/s",
        summary.lines,
        summary.bytes as f64 / 1e6,
        summary.seconds,
        summary.mb_per_s
    );
}
