use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::inmemory::spec::{Draw, InMemoryMachineSpec};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 26, 8, 0, 0).unwrap()
}

fn at(secs: f64) -> DateTime<Utc> {
    t0() + TimeDelta::nanoseconds((secs * 1e9).round() as i64)
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn spec(v: serde_json::Value) -> InMemoryMachineSpec {
    InMemoryMachineSpec::from_value(&v).unwrap()
}

/// Upstream's `clusterclass-in-memory.yaml` values: vm 10s, node/apiServer/etcd 2s, jitter 0.2.
fn upstream() -> InMemoryMachineSpec {
    let p = |d: &str| json!({"provisioning": {"startupDuration": d, "startupJitter": "0.2"}});
    spec(json!({"vm": p("10s"), "node": p("2s"), "apiServer": p("2s"), "etcd": p("2s")}))
}

fn timed(vm: &str, node: &str, etcd: &str, api: &str) -> InMemoryMachineSpec {
    let p = |d: &str| json!({"provisioning": {"startupDuration": d}});
    spec(json!({"vm": p(vm), "node": p(node), "etcd": p(etcd), "apiServer": p(api)}))
}

fn facts(control_plane: bool, now: DateTime<Utc>) -> MachineFacts {
    MachineFacts {
        control_plane,
        bootstrapped: false,
        cluster_infrastructure_provisioned: true,
        control_plane_initialized: true,
        bootstrap_data: true,
        vm_created: t0(),
        provisioned: Provisioned::default(),
        now,
    }
}

fn no_draw() -> Draws {
    Draws::default()
}

fn decide(spec: &InMemoryMachineSpec, f: &MachineFacts, d: &Draws) -> MachinePlan {
    decide_machine(spec, f, d).unwrap()
}

/// The conditions as (type, status, reason), for short assertions.
fn conds(plan: &MachinePlan) -> Vec<(&'static str, ConditionStatus, &'static str)> {
    plan.conditions
        .iter()
        .map(|c| (c.type_, c.status, c.reason))
        .collect()
}

use ConditionStatus::{False, True};

#[test]
fn cluster_infrastructure_gate_holds_every_phase_without_requeue() {
    for cp in [false, true] {
        let mut f = facts(cp, at(100.0));
        f.cluster_infrastructure_provisioned = false;
        // Even a bootstrapped machine with everything provisioned waits at the gate, as upstream.
        f.bootstrapped = true;
        f.provisioned = Provisioned {
            vm: Some(t0()),
            node: Some(t0()),
            etcd: Some(t0()),
            api_server: Some(t0()),
        };
        let plan = decide(&upstream(), &f, &no_draw());
        let mut want = vec![
            (
                "VMProvisioned",
                False,
                "WaitingForClusterInfrastructureReady",
            ),
            ("NodeProvisioned", False, "WaitingForVMProvisioned"),
        ];
        if cp {
            want.push(("EtcdProvisioned", False, "WaitingForVMProvisioned"));
            want.push(("APIServerProvisioned", False, "WaitingForVMProvisioned"));
        }
        assert_eq!(conds(&plan), want, "control plane: {cp}");
        assert_eq!(plan.requeue_after, None);
        assert!(!plan.annotate_bootstrapped);
        assert!(plan.provision_now().is_empty());
    }
}

#[test]
fn bootstrap_data_gate_says_what_it_waits_for() {
    // A worker before the control plane is initialized.
    let mut f = facts(false, at(1.0));
    f.bootstrap_data = false;
    f.control_plane_initialized = false;
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(
        conds(&plan),
        vec![
            ("VMProvisioned", False, "WaitingForControlPlaneInitialized"),
            ("NodeProvisioned", False, "WaitingForVMProvisioned"),
        ]
    );
    // A worker after it.
    f.control_plane_initialized = true;
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(plan.conditions[0].reason, "WaitingForBootstrapData");
    // A control plane never waits for the control plane to be initialized.
    let mut f = facts(true, at(1.0));
    f.bootstrap_data = false;
    f.control_plane_initialized = false;
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(
        conds(&plan),
        vec![
            ("VMProvisioned", False, "WaitingForBootstrapData"),
            ("NodeProvisioned", False, "WaitingForVMProvisioned"),
            ("EtcdProvisioned", False, "WaitingForVMProvisioned"),
            ("APIServerProvisioned", False, "WaitingForVMProvisioned"),
        ]
    );
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn vm_waits_its_startup_duration_from_its_creation() {
    let plan = decide(&upstream(), &facts(true, at(3.0)), &no_draw());
    assert_eq!(
        plan.state(Phase::Vm),
        Some(PhaseState::Starting { until: at(10.0) })
    );
    assert_eq!(plan.requeue_after, Some(ms(7_000)));
    assert_eq!(
        conds(&plan),
        vec![
            ("VMProvisioned", False, "WaitingForStartupTimeout"),
            ("NodeProvisioned", False, "WaitingForVMProvisioned"),
            ("EtcdProvisioned", False, "WaitingForVMProvisioned"),
            ("APIServerProvisioned", False, "WaitingForVMProvisioned"),
        ]
    );
    assert!(!plan.annotate_bootstrapped);
}

#[test]
fn a_phase_is_due_at_its_deadline_not_before() {
    let just_before = t0() + TimeDelta::seconds(10) - TimeDelta::nanoseconds(1);
    let plan = decide(&upstream(), &facts(false, just_before), &no_draw());
    assert_eq!(plan.requeue_after, Some(Duration::from_nanos(1)));
    assert!(plan.provision_now().is_empty());

    let plan = decide(&upstream(), &facts(false, at(10.0)), &no_draw());
    assert_eq!(plan.provision_now(), vec![Phase::Vm]);
    // The Node's delay counts from now, when VMProvisioned turns True.
    assert_eq!(
        plan.state(Phase::Node),
        Some(PhaseState::Starting { until: at(12.0) })
    );
    assert_eq!(plan.requeue_after, Some(ms(2_000)));
    assert_eq!(
        conds(&plan),
        vec![
            ("VMProvisioned", True, "Provisioned"),
            ("NodeProvisioned", False, "WaitingForStartupTimeout"),
        ]
    );
}

#[test]
fn jitter_stretches_the_delay_by_the_draw() {
    // 10s with jitter 0.2: 10s at draw 0, 11s at 0.5, just under 12s at the top.
    let half = Draws {
        vm: Draw::new(0.5).unwrap(),
        ..Draws::default()
    };
    let plan = decide(&upstream(), &facts(false, at(10.5)), &half);
    assert_eq!(
        plan.state(Phase::Vm),
        Some(PhaseState::Starting { until: at(11.0) })
    );
    assert_eq!(plan.requeue_after, Some(ms(500)));
    let plan = decide(&upstream(), &facts(false, at(11.0)), &half);
    assert_eq!(plan.provision_now(), vec![Phase::Vm]);

    let top = Draws::all(Draw::new(0.999_999_999).unwrap());
    let plan = decide(&upstream(), &facts(false, at(11.999)), &top);
    assert!(matches!(
        plan.state(Phase::Vm),
        Some(PhaseState::Starting { .. })
    ));
    let plan = decide(&upstream(), &facts(false, at(12.0)), &top);
    assert_eq!(plan.provision_now(), vec![Phase::Vm]);

    // Jitter 1.0 (the top of its range) doubles the delay at most; 0.0 adds nothing.
    let full =
        spec(json!({"vm": {"provisioning": {"startupDuration": "2s", "startupJitter": "1.0"}}}));
    let plan = decide(
        &full,
        &facts(false, at(1.0)),
        &Draws::all(Draw::new(0.5).unwrap()),
    );
    assert_eq!(plan.requeue_after, Some(ms(2_000)));
    let zero =
        spec(json!({"vm": {"provisioning": {"startupDuration": "2s", "startupJitter": "0.0"}}}));
    let plan = decide(
        &zero,
        &facts(false, at(1.0)),
        &Draws::all(Draw::new(0.5).unwrap()),
    );
    assert_eq!(plan.requeue_after, Some(ms(1_000)));

    // Each phase uses its own draw.
    let node_only = Draws {
        node: Draw::new(0.5).unwrap(),
        ..Draws::default()
    };
    let mut f = facts(false, at(10.0));
    f.provisioned.vm = Some(at(10.0));
    let plan = decide(&upstream(), &f, &node_only);
    assert_eq!(
        plan.state(Phase::Node),
        Some(PhaseState::Starting { until: at(12.2) })
    );
}

#[test]
fn node_counts_from_vm_provisioned_and_a_worker_is_then_done() {
    let mut f = facts(false, at(11.0));
    f.provisioned.vm = Some(at(10.0));
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(
        plan.state(Phase::Vm),
        Some(PhaseState::Provisioned { since: at(10.0) })
    );
    assert_eq!(plan.requeue_after, Some(ms(1_000)));
    assert!(!plan.annotate_bootstrapped);

    f.now = at(12.0);
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(plan.provision_now(), vec![Phase::Node]);
    assert_eq!(plan.phases.len(), 2, "a worker has no etcd nor API server");
    assert_eq!(
        conds(&plan),
        vec![
            ("VMProvisioned", True, "Provisioned"),
            ("NodeProvisioned", True, "Provisioned"),
        ]
    );
    assert_eq!(plan.requeue_after, None);
    assert!(plan.annotate_bootstrapped);
}

#[test]
fn control_plane_etcd_and_api_server_wait_for_vm_then_node() {
    // VM provisioned, Node starting: both wait for the Node.
    let mut f = facts(true, at(11.0));
    f.provisioned.vm = Some(at(10.0));
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(
        conds(&plan),
        vec![
            ("VMProvisioned", True, "Provisioned"),
            ("NodeProvisioned", False, "WaitingForStartupTimeout"),
            ("EtcdProvisioned", False, "WaitingForNodeProvisioned"),
            ("APIServerProvisioned", False, "WaitingForNodeProvisioned"),
        ]
    );
    // The Node comes due: etcd and the API server count from now.
    f.now = at(12.0);
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(plan.provision_now(), vec![Phase::Node]);
    assert_eq!(
        plan.state(Phase::Etcd),
        Some(PhaseState::Starting { until: at(14.0) })
    );
    assert_eq!(
        plan.state(Phase::ApiServer),
        Some(PhaseState::Starting { until: at(14.0) })
    );
    assert!(
        !plan.annotate_bootstrapped,
        "a control plane is done with its API server"
    );
    // Both come due.
    f.provisioned.node = Some(at(12.0));
    f.now = at(14.0);
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(plan.provision_now(), vec![Phase::Etcd, Phase::ApiServer]);
    assert!(plan.conditions.iter().all(|c| c.status == True));
    assert_eq!(plan.requeue_after, None);
    assert!(plan.annotate_bootstrapped);
}

#[test]
fn requeue_is_the_shortest_wait_and_the_api_server_alone_completes_a_control_plane() {
    let mut f = facts(true, at(1.0));
    f.provisioned.vm = Some(t0());
    f.provisioned.node = Some(t0());
    let plan = decide(&timed("0s", "0s", "5s", "3s"), &f, &no_draw());
    assert_eq!(plan.requeue_after, Some(ms(2_000)));
    assert_eq!(plan.provision_now(), Vec::<Phase>::new());

    // The API server is up before etcd: upstream annotates the Machine then, etcd still starting.
    f.now = at(3.0);
    let plan = decide(&timed("0s", "0s", "5s", "3s"), &f, &no_draw());
    assert_eq!(plan.provision_now(), vec![Phase::ApiServer]);
    assert_eq!(
        plan.state(Phase::Etcd),
        Some(PhaseState::Starting { until: at(5.0) })
    );
    assert_eq!(plan.requeue_after, Some(ms(2_000)));
    assert!(plan.annotate_bootstrapped);

    // Etcd done, API server not: not annotated.
    let plan = decide(
        &timed("0s", "0s", "1s", "3s"),
        &facts_with(f, at(2.0)),
        &no_draw(),
    );
    assert_eq!(plan.provision_now(), vec![Phase::Etcd]);
    assert!(!plan.annotate_bootstrapped);
}

fn facts_with(mut f: MachineFacts, now: DateTime<Utc>) -> MachineFacts {
    f.now = now;
    f
}

#[test]
fn zero_delays_provision_every_phase_in_one_reconcile() {
    for s in [
        InMemoryMachineSpec::default(),
        timed("0s", "0", "0ms", "0h"),
    ] {
        let plan = decide(&s, &facts(true, t0()), &Draws::all(Draw::new(0.9).unwrap()));
        assert_eq!(
            plan.provision_now(),
            vec![Phase::Vm, Phase::Node, Phase::Etcd, Phase::ApiServer]
        );
        assert_eq!(plan.requeue_after, None);
        assert!(plan.annotate_bootstrapped);
    }
}

#[test]
fn bootstrapped_machines_skip_every_wait() {
    for cp in [false, true] {
        let mut f = facts(cp, t0());
        f.bootstrapped = true;
        let plan = decide(&timed("1h", "1h", "1h", "1h"), &f, &no_draw());
        assert_eq!(plan.provision_now(), Phase::of(cp).to_vec());
        assert!(plan.conditions.iter().all(|c| c.reason == "Provisioned"));
        assert_eq!(plan.requeue_after, None);
        assert!(!plan.annotate_bootstrapped, "already annotated");
    }
    // After a restart: the conditions survived, so the phases are provisioned since then.
    let mut f = facts(true, at(1000.0));
    f.bootstrapped = true;
    f.provisioned = Provisioned {
        vm: Some(at(10.0)),
        node: Some(at(12.0)),
        etcd: None,
        api_server: Some(at(14.0)),
    };
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(plan.provision_now(), vec![Phase::Etcd]);
    assert_eq!(
        plan.state(Phase::ApiServer),
        Some(PhaseState::Provisioned { since: at(14.0) })
    );
}

#[test]
fn provisioned_phases_stay_provisioned_and_an_unannotated_machine_gets_annotated() {
    let mut f = facts(true, at(1.0));
    f.provisioned = Provisioned {
        vm: Some(t0()),
        node: Some(t0()),
        etcd: Some(t0()),
        api_server: Some(t0()),
    };
    // Long delays would not be over yet: a True condition is not re-timed (upstream re-times).
    let plan = decide(&timed("1h", "1h", "1h", "1h"), &f, &no_draw());
    assert!(
        plan.phases
            .iter()
            .all(|(_, s)| *s == PhaseState::Provisioned { since: t0() })
    );
    assert!(plan.provision_now().is_empty());
    assert_eq!(plan.requeue_after, None);
    assert!(plan.annotate_bootstrapped);
}

#[test]
fn a_node_without_its_vm_waits_for_the_vm() {
    // Upstream's order: the VM's condition went False again (e.g. the gate closed and opened).
    let mut f = facts(true, at(1.0));
    f.provisioned.node = Some(t0());
    f.provisioned.api_server = Some(t0());
    let plan = decide(&upstream(), &f, &no_draw());
    assert_eq!(
        conds(&plan),
        vec![
            ("VMProvisioned", False, "WaitingForStartupTimeout"),
            ("NodeProvisioned", False, "WaitingForVMProvisioned"),
            ("EtcdProvisioned", False, "WaitingForVMProvisioned"),
            ("APIServerProvisioned", False, "WaitingForVMProvisioned"),
        ]
    );
    assert!(!plan.annotate_bootstrapped);
}

#[test]
fn a_delay_past_the_end_of_time_is_an_error() {
    let mut f = facts(false, DateTime::<Utc>::MAX_UTC - TimeDelta::seconds(5));
    f.vm_created = f.now;
    assert_eq!(
        decide_machine(&upstream(), &f, &no_draw()),
        Err(PhaseError::TimeOutOfRange(Phase::Vm))
    );
}

#[test]
fn provisioned_since_is_read_from_true_conditions() {
    let cond = |type_: &str, status, secs| Condition {
        type_: type_.into(),
        status,
        observed_generation: None,
        last_transition_time: at(secs),
        reason: "r".into(),
        message: String::new(),
    };
    let p = Provisioned::from_conditions(&[
        cond("Ready", False, 1.0),
        cond("VMProvisioned", True, 10.0),
        cond("NodeProvisioned", True, 12.0),
        cond("EtcdProvisioned", False, 13.0),
        cond("APIServerProvisioned", ConditionStatus::Unknown, 14.0),
    ]);
    assert_eq!(
        p,
        Provisioned {
            vm: Some(at(10.0)),
            node: Some(at(12.0)),
            etcd: None,
            api_server: None,
        }
    );
    assert_eq!(Provisioned::from_conditions(&[]), Provisioned::default());
}

#[test]
fn names_and_conditions_are_upstreams() {
    assert_eq!(provider_id("md-0-abc12"), "in-memory://md-0-abc12");
    assert_eq!(listener_name("ns", "c1"), "ns/c1");
    assert_eq!(
        BOOTSTRAPPED_ANNOTATION,
        "machine.inmemory.infrastructure.cluster.x-k8s.io/bootstrapped"
    );
    let mut a = BTreeMap::new();
    assert!(!has_bootstrapped_annotation(None));
    assert!(!has_bootstrapped_annotation(Some(&a)));
    a.insert(BOOTSTRAPPED_ANNOTATION.to_owned(), String::new());
    assert!(has_bootstrapped_annotation(Some(&a)));
    assert_eq!(ready_from(false), ["VMProvisioned", "NodeProvisioned"]);
    assert_eq!(
        ready_from(true),
        [
            "VMProvisioned",
            "NodeProvisioned",
            "EtcdProvisioned",
            "APIServerProvisioned"
        ]
    );
    for cp in [false, true] {
        let types: Vec<_> = Phase::of(cp).iter().map(|p| p.condition_type()).collect();
        assert_eq!(types, ready_from(cp));
    }
}

// The DevCluster.

const POD: &str = "10.244.0.7";

fn endpoint(host: Option<&str>, port: Option<i32>) -> ApiEndpoint {
    ApiEndpoint {
        host: host.map(str::to_owned),
        port,
    }
}

fn cluster(e: Option<&ApiEndpoint>, provisioned: bool) -> ClusterFacts<'_> {
    ClusterFacts {
        endpoint: e,
        provisioned,
        host: POD,
    }
}

#[test]
fn a_new_cluster_gets_this_host_and_the_allocated_port() {
    // No endpoint, or only the schema's default port: allocate.
    let schema_default = endpoint(None, Some(6443));
    for e in [None, Some(&schema_default), Some(&endpoint(None, None))] {
        let f = cluster(e, false);
        assert_eq!(
            cluster_step(&f),
            Ok(ClusterStep::Listen(PortRequest::Allocate))
        );
        assert_eq!(
            cluster_listened(&f, PortAllocation::Port(20000)),
            ClusterPlan {
                endpoint: Some(endpoint(Some(POD), Some(20000))),
                provisioned: true,
                condition: None,
            }
        );
    }
}

#[test]
fn a_given_port_is_kept() {
    // A user's port without a host: kept, the host filled in.
    let e = endpoint(None, Some(20005));
    let f = cluster(Some(&e), false);
    assert_eq!(
        cluster_step(&f),
        Ok(ClusterStep::Listen(PortRequest::Keep(20005)))
    );
    assert_eq!(
        cluster_listened(&f, PortAllocation::Port(20005)).endpoint,
        Some(endpoint(Some(POD), Some(20005)))
    );
    // A full endpoint on this host (a restart, an adoption): kept, nothing written.
    let e = endpoint(Some(POD), Some(20003));
    for provisioned in [false, true] {
        let f = cluster(Some(&e), provisioned);
        assert_eq!(
            cluster_step(&f),
            Ok(ClusterStep::Listen(PortRequest::Keep(20003)))
        );
        assert_eq!(
            cluster_listened(&f, PortAllocation::Port(20003)),
            ClusterPlan {
                endpoint: None,
                provisioned: true,
                condition: None
            }
        );
    }
    // With a host, even the schema's default port is the endpoint's own.
    let e = endpoint(Some(POD), Some(6443));
    assert_eq!(
        cluster_step(&cluster(Some(&e), false)),
        Ok(ClusterStep::Listen(PortRequest::Keep(6443)))
    );
}

#[test]
fn a_provisioned_cluster_on_another_host_moves_to_this_one() {
    let e = endpoint(Some("10.244.0.3"), Some(20001));
    assert_eq!(
        cluster_step(&cluster(Some(&e), true)),
        Ok(ClusterStep::MoveHost {
            endpoint: endpoint(Some(POD), Some(20001)),
            kubeconfig_server: "https://10.244.0.7:20001".into(),
            requeue_after: Duration::from_secs(1),
        })
    );
    // Not provisioned yet: no move (the first reconcile keeps what it is given).
    assert_eq!(
        cluster_step(&cluster(Some(&e), false)),
        Ok(ClusterStep::Listen(PortRequest::Keep(20001)))
    );
    // An IPv6 pod address is bracketed in the kubeconfig's server.
    let f = ClusterFacts {
        endpoint: Some(&e),
        provisioned: true,
        host: "fd00::7",
    };
    let Ok(ClusterStep::MoveHost {
        kubeconfig_server, ..
    }) = cluster_step(&f)
    else {
        panic!("expected a move")
    };
    assert_eq!(kubeconfig_server, "https://[fd00::7]:20001");
}

#[test]
fn exhausted_ports_write_nothing_and_say_so_on_ready() {
    let f = cluster(None, false);
    let plan = cluster_listened(
        &f,
        PortAllocation::Exhausted {
            min: DEFAULT_MIN_PORT,
            max: DEFAULT_MAX_PORT,
        },
    );
    assert_eq!(plan.endpoint, None);
    assert!(!plan.provisioned);
    let c = plan.condition.unwrap();
    assert_eq!(
        (c.type_, c.status, c.reason),
        ("Ready", False, "PortRangeExhausted")
    );
    assert!(c.message.contains("20000-30000"), "{}", c.message);
}

#[test]
fn a_port_outside_tcp_is_an_error() {
    for p in [0, -1, 65536, i32::MAX] {
        let e = endpoint(Some(POD), Some(p));
        assert_eq!(
            cluster_step(&cluster(Some(&e), true)),
            Err(BadPort(p)),
            "{p}"
        );
    }
    assert_eq!(
        BadPort(0).to_string(),
        "spec.controlPlaneEndpoint.port 0 is not a TCP port (1-65535)"
    );
}
