use std::time::Duration;

use serde_json::json;

use super::*;
use crate::api::dev::{DevCluster, DevClusterTemplate, DevMachine, DevMachineTemplate};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The DevMachineTemplates of upstream's `clusterclass-in-memory.yaml` (control plane and
/// workers alike): vm 10s, node/apiServer/etcd 2s, each with jitter "0.2".
fn upstream_flavor() -> Value {
    json!({
        "vm": {"provisioning": {"startupDuration": "10s", "startupJitter": "0.2"}},
        "node": {"provisioning": {"startupDuration": "2s", "startupJitter": "0.2"}},
        "apiServer": {"provisioning": {"startupDuration": "2s", "startupJitter": "0.2"}},
        "etcd": {"provisioning": {"startupDuration": "2s", "startupJitter": "0.2"}},
    })
}

#[test]
fn upstream_flavor_values_parse() {
    let spec = InMemoryMachineSpec::from_value(&upstream_flavor()).unwrap();
    let two = Provisioning {
        startup_duration: secs(2),
        startup_jitter: 0.2,
    };
    assert_eq!(
        spec,
        InMemoryMachineSpec {
            vm: Some(Provisioning {
                startup_duration: secs(10),
                startup_jitter: 0.2
            }),
            node: Some(two),
            api_server: Some(two),
            etcd: Some(two),
        }
    );
}

#[test]
fn reads_from_dev_machine_and_its_template() {
    let dm: DevMachine = serde_json::from_value(json!({
        "metadata": {"name": "m"},
        "spec": {"backend": {"inMemory": upstream_flavor()}}
    }))
    .unwrap();
    let spec = InMemoryMachineSpec::of(&dm.spec.backend).unwrap().unwrap();
    assert_eq!(spec.vm.unwrap().startup_duration, secs(10));

    // Upstream's ClusterClassChanges e2e spec rotates the template with vm 15s.
    let mut flavor = upstream_flavor();
    flavor["vm"]["provisioning"]["startupDuration"] = json!("15s");
    let dmt: DevMachineTemplate = serde_json::from_value(json!({
        "metadata": {"name": "t"},
        "spec": {"template": {"spec": {"backend": {"inMemory": flavor}}}}
    }))
    .unwrap();
    let spec = InMemoryMachineSpec::of(&dmt.spec.template.spec.backend)
        .unwrap()
        .unwrap();
    assert_eq!(spec.vm.unwrap().startup_duration, secs(15));
    assert_eq!(spec.node.unwrap().startup_duration, secs(2));

    // A docker DevMachine has no in-memory spec.
    let docker: DevMachine = serde_json::from_value(json!({
        "metadata": {"name": "m"}, "spec": {"backend": {"docker": {}}}
    }))
    .unwrap();
    assert_eq!(InMemoryMachineSpec::of(&docker.spec.backend), Ok(None));
}

#[test]
fn reads_from_dev_cluster_and_its_template() {
    let dc: DevCluster = serde_json::from_value(json!({
        "metadata": {"name": "c"}, "spec": {"backend": {"inMemory": {}}}
    }))
    .unwrap();
    assert_eq!(
        InMemoryClusterSpec::of(&dc.spec.backend),
        Ok(Some(InMemoryClusterSpec))
    );
    let dct: DevClusterTemplate = serde_json::from_value(json!({
        "metadata": {"name": "t"},
        "spec": {"template": {"spec": {"backend": {"inMemory": {}}}}}
    }))
    .unwrap();
    assert_eq!(
        InMemoryClusterSpec::of(&dct.spec.template.spec.backend),
        Ok(Some(InMemoryClusterSpec))
    );
    let docker: DevCluster = serde_json::from_value(json!({
        "metadata": {"name": "c"}, "spec": {"backend": {"docker": {}}}
    }))
    .unwrap();
    assert_eq!(InMemoryClusterSpec::of(&docker.spec.backend), Ok(None));
    assert_eq!(
        InMemoryClusterSpec::from_value(&json!("yes")),
        Err(SpecError::WrongType {
            field: "inMemory".into(),
            expected: "an object",
            found: "a string"
        })
    );
}

#[test]
fn left_out_parts_are_no_delay() {
    assert_eq!(
        InMemoryMachineSpec::from_value(&json!({})).unwrap(),
        InMemoryMachineSpec::default()
    );
    // A component without provisioning, a null one, a null provisioning.
    let spec = InMemoryMachineSpec::from_value(&json!({
        "vm": {}, "node": null, "etcd": {"provisioning": null},
        "apiServer": {"provisioning": {"startupDuration": "1s"}}
    }))
    .unwrap();
    assert_eq!(spec.vm, None);
    assert_eq!(spec.node, None);
    assert_eq!(spec.etcd, None);
    // No jitter given: zero.
    assert_eq!(
        spec.api_server,
        Some(Provisioning {
            startup_duration: secs(1),
            startup_jitter: 0.0
        })
    );
    // Empty jitter is none too (upstream skips parsing it); unknown keys are ignored.
    let spec = InMemoryMachineSpec::from_value(&json!({
        "vm": {"provisioning": {"startupDuration": "3s", "startupJitter": "", "extra": 1}},
        "gpu": {"provisioning": "whatever"}
    }))
    .unwrap();
    assert_eq!(spec.vm.unwrap().startup_jitter, 0.0);
}

fn err(v: Value) -> SpecError {
    InMemoryMachineSpec::from_value(&v).unwrap_err()
}

#[test]
fn wrong_json_types_are_named_with_their_field() {
    assert_eq!(
        err(json!([])),
        SpecError::WrongType {
            field: "inMemory".into(),
            expected: "an object",
            found: "an array"
        }
    );
    assert_eq!(
        err(json!({"vm": "10s"})),
        SpecError::WrongType {
            field: "inMemory.vm".into(),
            expected: "an object",
            found: "a string"
        }
    );
    assert_eq!(
        err(json!({"node": {"provisioning": true}})),
        SpecError::WrongType {
            field: "inMemory.node.provisioning".into(),
            expected: "an object",
            found: "a boolean"
        }
    );
    assert_eq!(
        err(json!({"etcd": {"provisioning": {"startupDuration": 10}}})),
        SpecError::WrongType {
            field: "inMemory.etcd.provisioning.startupDuration".into(),
            expected: "a string",
            found: "a number"
        }
    );
    assert_eq!(
        err(
            json!({"apiServer": {"provisioning": {"startupDuration": "1s", "startupJitter": 0.2}}})
        ),
        SpecError::WrongType {
            field: "inMemory.apiServer.provisioning.startupJitter".into(),
            expected: "a string",
            found: "a number"
        }
    );
}

#[test]
fn startup_duration_is_required_in_provisioning() {
    for provisioning in [
        json!({}),
        json!({"startupJitter": "0.1"}),
        json!({"startupDuration": null}),
    ] {
        assert_eq!(
            err(json!({"vm": {"provisioning": provisioning}})),
            SpecError::Missing {
                field: "inMemory.vm.provisioning.startupDuration".into()
            }
        );
    }
}

#[test]
fn bad_durations_and_jitters_are_errors_with_their_value() {
    let bad_duration = |d: &str, reason: DurationError| {
        assert_eq!(
            err(json!({"node": {"provisioning": {"startupDuration": d}}})),
            SpecError::Duration {
                field: "inMemory.node.provisioning.startupDuration".into(),
                value: d.into(),
                reason
            },
            "{d}"
        );
    };
    bad_duration("10", DurationError::MissingUnit);
    bad_duration("10d", DurationError::UnknownUnit("d".into()));
    bad_duration("1m30sec", DurationError::UnknownUnit("sec".into()));
    bad_duration("-5s", DurationError::Negative);
    bad_duration("", DurationError::Empty);
    bad_duration("s", DurationError::Malformed);
    let bad_jitter = |j: &str, reason: JitterError| {
        assert_eq!(
            err(json!({"etcd": {"provisioning": {"startupDuration": "1s", "startupJitter": j}}})),
            SpecError::Jitter {
                field: "inMemory.etcd.provisioning.startupJitter".into(),
                value: j.into(),
                reason
            },
            "{j}"
        );
    };
    bad_jitter("1.5", JitterError::OutOfRange);
    bad_jitter("-0.1", JitterError::OutOfRange);
    bad_jitter("20%", JitterError::NotANumber);
    bad_jitter("0,2", JitterError::NotANumber);
    bad_jitter("NaN", JitterError::NotFinite);
    bad_jitter("inf", JitterError::NotFinite);
    // The messages say where and what.
    let e = err(json!({"vm": {"provisioning": {"startupDuration": "10d"}}}));
    assert_eq!(
        e.to_string(),
        "inMemory.vm.provisioning.startupDuration: invalid duration \"10d\": \
         unknown unit \"d\" (ns, us, µs, ms, s, m, h)"
    );
}

#[test]
fn jitter_bounds_are_inclusive() {
    assert_eq!(parse_jitter("0.0"), Ok(0.0));
    assert_eq!(parse_jitter("1.0"), Ok(1.0));
    assert_eq!(parse_jitter("1"), Ok(1.0));
    assert_eq!(parse_jitter("0.2"), Ok(0.2));
    assert_eq!(parse_jitter(".5"), Ok(0.5));
    assert_eq!(parse_jitter("1e-1"), Ok(0.1));
    assert_eq!(parse_jitter("1.0000001"), Err(JitterError::OutOfRange));
}

#[test]
fn go_durations_parse_as_go_does() {
    let ok = |s: &str, nanos: u64| {
        assert_eq!(parse_go_duration(s), Ok(Duration::from_nanos(nanos)), "{s}")
    };
    ok("10s", 10_000_000_000);
    ok("1m30s", 90_000_000_000);
    ok("500ms", 500_000_000);
    ok("1h", 3_600_000_000_000);
    ok("1.5h", 5_400_000_000_000);
    ok(
        "2h45m30.5s",
        ((2 * 3600 + 45 * 60 + 30) * 1_000_000_000) + 500_000_000,
    );
    ok("0", 0);
    ok("+0", 0);
    ok("-0", 0);
    ok("0s", 0);
    ok("-0s", 0);
    ok("+5s", 5_000_000_000);
    ok(".5s", 500_000_000);
    ok("5.s", 5_000_000_000);
    ok("1ns", 1);
    ok("1us", 1_000);
    ok("1µs", 1_000); // U+00B5 MICRO SIGN
    ok("1μs", 1_000); // U+03BC GREEK SMALL LETTER MU
    ok("100ms1ns", 100_000_001);
    ok("0.000000001s", 1);
    // A fraction longer than fits is truncated, not refused.
    ok("1.00000000000000000000000000001s", 1_000_000_000);
    // Go's largest: 2^63-1 ns.
    ok("9223372036854775807ns", i64::MAX as u64);
    ok("2562047h47m16.854775807s", i64::MAX as u64);

    let bad = |s: &str, e: DurationError| assert_eq!(parse_go_duration(s), Err(e), "{s}");
    bad("", DurationError::Empty);
    bad("-", DurationError::Malformed);
    bad("+", DurationError::Malformed);
    bad(".", DurationError::Malformed);
    bad(".s", DurationError::Malformed);
    bad("s10", DurationError::Malformed);
    bad(" 10s", DurationError::Malformed);
    bad("1", DurationError::MissingUnit);
    bad("1s2", DurationError::MissingUnit);
    bad("10S", DurationError::UnknownUnit("S".into()));
    bad("10 s", DurationError::UnknownUnit(" s".into()));
    bad("1y", DurationError::UnknownUnit("y".into()));
    bad("1µ", DurationError::UnknownUnit("µ".into()));
    bad("-1ns", DurationError::Negative);
    bad("-1m30s", DurationError::Negative);
    bad("9223372036854775808ns", DurationError::Overflow);
    bad("2562048h", DurationError::Overflow);
    bad("99999999999999999999s", DurationError::Overflow);
    bad("2562047h47m16.854775808s", DurationError::Overflow);
}

#[test]
fn delay_adds_the_drawn_share_of_the_jitter() {
    let p = Provisioning {
        startup_duration: secs(10),
        startup_jitter: 0.2,
    };
    assert_eq!(p.delay(Draw::new(0.0).unwrap()), secs(10));
    assert_eq!(p.delay(Draw::new(0.5).unwrap()), secs(11));
    // The largest draw stays below duration × (1 + jitter).
    let top = p.delay(Draw::new(0.999_999_999).unwrap());
    assert!(
        top < secs(12) && top > Duration::from_millis(11_999),
        "{top:?}"
    );
    // Full jitter: up to twice the duration.
    let full = Provisioning {
        startup_duration: secs(2),
        startup_jitter: 1.0,
    };
    assert_eq!(
        full.delay(Draw::new(0.25).unwrap()),
        Duration::from_millis(2_500)
    );
    // No jitter: the draw does not matter.
    let none = Provisioning {
        startup_duration: secs(2),
        startup_jitter: 0.0,
    };
    assert_eq!(none.delay(Draw::new(0.9).unwrap()), secs(2));
    // Truncated to the nanosecond below: 0.3 × 0.1 × 1ns is 0.
    let tiny = Provisioning {
        startup_duration: Duration::from_nanos(1),
        startup_jitter: 0.1,
    };
    assert_eq!(tiny.delay(Draw::new(0.3).unwrap()), Duration::from_nanos(1));
    // The longest duration with full jitter does not overflow.
    let longest = Provisioning {
        startup_duration: Duration::from_nanos(i64::MAX as u64),
        startup_jitter: 1.0,
    };
    assert!(longest.delay(Draw::new(0.999).unwrap()) > longest.startup_duration);
}

#[test]
fn draws_stay_within_zero_to_one() {
    assert!(Draw::new(0.0).is_ok());
    assert!(Draw::new(0.999_999).is_ok());
    assert_eq!(Draw::new(1.0), Err(DrawError(1.0)));
    assert_eq!(Draw::new(-0.1), Err(DrawError(-0.1)));
    assert!(Draw::new(f64::NAN).is_err());
    assert_eq!(Draw::from_bits(0).value(), 0.0);
    assert_eq!(Draw::from_bits(1 << 63).value(), 0.5);
    let top = Draw::from_bits(u64::MAX).value();
    assert!(top < 1.0 && top > 0.999_999, "{top}");
}
