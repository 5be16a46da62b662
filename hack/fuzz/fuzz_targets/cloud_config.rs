//! Any bytes as a cloud-config bootstrap Secret value: an error or a plan, never a panic, hang or
//! unbounded allocation (libFuzzer's -rss_limit_mb / -malloc_limit_mb catch those).
#![no_main]
use capd::bootstrap::{Format, NodeOptions, commands};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = commands(Format::CloudConfig, data, &NodeOptions::default());
    let _ = commands(Format::CloudConfig, data, &NodeOptions { cgroup_v1: true });
});
