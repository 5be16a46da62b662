//! The `process_*` series of Prometheus' Go client (what controller-runtime managers export and
//! CAPI's dashboards chart), read from `/proc/self` at each scrape. No crate fits
//! prometheus-client 0.25 for this, and five small files are all it takes. Off Linux (no
//! `/proc`) the series are simply absent.
use std::fs;

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
};

/// Clock ticks per second of `/proc/<pid>/stat`'s times: USER_HZ, 100 on every Linux ABI Rust
/// targets (the kernel scales to it whatever its internal HZ).
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What one reading of `/proc` gives; a field it could not read is `None` and not exported.
#[derive(Debug, Default, PartialEq)]
pub struct Reading {
    pub cpu_seconds: Option<f64>,
    pub start_time_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

impl Reading {
    pub fn now() -> Self {
        let stat = fs::read_to_string("/proc/self/stat").ok();
        let status = fs::read_to_string("/proc/self/status").ok();
        let limits = fs::read_to_string("/proc/self/limits").ok();
        let boot = fs::read_to_string("/proc/stat").ok();
        let fields = stat.as_deref().map(stat_fields).unwrap_or_default();
        // Fields counted from `state` (the third of proc(5)): utime 14, stime 15, starttime 22.
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
        let boot_time = boot.as_deref().and_then(|b| {
            b.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        });
        Self {
            cpu_seconds: field(14)
                .zip(field(15))
                .map(|(u, s)| (u + s) / TICKS_PER_SECOND),
            start_time_seconds: boot_time
                .zip(field(22))
                .map(|(boot, ticks)| boot + ticks / TICKS_PER_SECOND),
            resident_bytes: status.as_deref().and_then(|s| kib(s, "VmRSS:")),
            virtual_bytes: status.as_deref().and_then(|s| kib(s, "VmSize:")),
            open_fds: fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64),
            max_fds: limits.as_deref().and_then(max_open_files),
        }
    }
}

/// The fields after the command name, which is in parentheses and may itself hold spaces or
/// parentheses: everything after the last `)`.
fn stat_fields(stat: &str) -> Vec<String> {
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// A `Key:   1234 kB` line of `/proc/self/status`, in bytes.
fn kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    let value: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(value * 1024)
}

/// The soft limit of `Max open files` in `/proc/self/limits` ("unlimited" is not exported).
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

fn gauge<N>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<N>,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    let Some(value) = value else { return Ok(()) };
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = Reading::now();
        if let Some(cpu) = r.cpu_seconds {
            let metric = ConstCounter::new(cpu);
            metric.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                metric.metric_type(),
            )?)?;
        }
        let as_i64 = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            r.start_time_seconds,
        )?;
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            as_i64(r.resident_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            as_i64(r.virtual_bytes),
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors.",
            as_i64(r.open_fds),
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            as_i64(r.max_fds),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// How long this process has been running according to a [`Reading`].
    fn uptime(r: &Reading) -> Option<Duration> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs_f64();
        Some(Duration::from_secs_f64(
            (now - r.start_time_seconds?).max(0.0),
        ))
    }

    #[test]
    fn parses_stat_with_a_tricky_command_name() {
        let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1234 0 0";
        let fields = stat_fields(stat);
        assert_eq!(fields[0], "S");
        // utime (14) and stime (15).
        assert_eq!(fields[14 - 3], "250");
        assert_eq!(fields[15 - 3], "50");
        assert_eq!(fields[22 - 3], "1234");
    }

    #[test]
    fn parses_status_and_limits() {
        assert_eq!(
            kib("Name:\tx\nVmSize:\t  2048 kB\nVmRSS:\t 512 kB\n", "VmRSS:"),
            Some(512 * 1024)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 1048576              files\n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            max_open_files("Max open files            unlimited            unlimited  files"),
            None
        );
    }

    #[test]
    fn reads_this_process() {
        let r = Reading::now();
        assert!(r.resident_bytes.unwrap() > 0);
        assert!(r.virtual_bytes.unwrap() >= r.resident_bytes.unwrap());
        assert!(r.open_fds.unwrap() >= 3, "stdin, stdout, stderr at least");
        assert!(r.max_fds.unwrap() >= r.open_fds.unwrap());
        assert!(r.cpu_seconds.is_some());
        // Started within the last day: the clock-tick arithmetic is right.
        assert!(uptime(&r).unwrap() < Duration::from_secs(86_400));
    }
}
