//! The core of sonde's log source: reading lines from files so that none is
//! lost or read twice.
#![deny(missing_docs)]

pub mod checkpoint;
pub mod identity;
pub mod lines;
pub mod tailer;
