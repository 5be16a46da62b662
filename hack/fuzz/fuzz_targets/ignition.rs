//! Any bytes as an Ignition bootstrap Secret value (JSON, or the same document in YAML).
#![no_main]
use capd::bootstrap::{Format, NodeOptions, commands};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = commands(Format::Ignition, data, &NodeOptions::default());
});
