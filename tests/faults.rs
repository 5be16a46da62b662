//! Faults, measured (issue 13). This binary restarts the plane's kube-apiserver, so it must run
//! alone: `cargo test --test faults -- --ignored --nocapture` (not yet part of hack/test.sh: the
//! SIGTERM case still varies between 7 and 18 s, see the test).
mod common;

use std::{process::Command, time::Duration, time::Instant};

use common::*;
use kube::ResourceExt;
use serde_json::json;

const BOOTSTRAP_OK: &str = include_str!("fixtures/bootstrap-ok.yaml");

/// `hack/plane.sh restart-apiserver <signal>`: returns once the new server is ready.
fn restart_apiserver(signal: &str) {
    let status = Command::new("hack/plane.sh")
        .args(["restart-apiserver", signal])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("hack/plane.sh");
    assert!(status.success(), "hack/plane.sh restart-apiserver {signal}");
}

/// After the API server restarts, the manager acts on a new object within seconds of the
/// server answering again (the watches' retry delay used to grow to 30 s while the server was
/// away). Measured so far: SIGKILL 19.5 s before the watch backoff change, 8.0 s after; SIGTERM
/// (a 64 s graceful shutdown) 7.4 s before, 7.0 and 18 s after: a watch re-established against
/// the just-started server can fail again with 410 Gone and stall; not yet understood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "restarts the plane's API server: run alone, by hand"]
async fn api_server_restart_then_new_objects_are_acted_on_within_seconds() {
    let mut env = TestEnv::new("apirst").await;
    env.forbidden_expected = true;
    env.start_manager(&[], None);
    env.run(|env| async move {
        let ns = env.namespace("a").await;
        let name = format!("{}-c", env.id);
        env.provisioned_cluster(&ns, &name).await;
        env.create_secret(&ns, "boot", Some(BOOTSTRAP_OK), None).await;

        for (i, signal) in ["TERM", "KILL"].iter().enumerate() {
            let down = Instant::now();
            restart_apiserver(signal);
            let back = Instant::now();
            // Ready, but its CRDs may be served a moment later; and the test's own pooled
            // connections died with the old server.
            let machines: kube::Api<kube::api::DynamicObject> =
                kube::Api::namespaced_with(env.client.clone(), &ns, &capi("Machine"));
            eventually(Duration::from_secs(30), "Machines served again", || async {
                machines.list(&Default::default()).await.ok()
            })
            .await;
            let machine = format!("{name}-w{i}");
            env.create_machine(&ns, &name, &machine, false, Some("boot"), json!({"customImage": NODE_IMAGE}))
                .await;
            let created = back.elapsed();
            eventually(Duration::from_secs(120), "the new machine's finalizer", || async {
                env.docker_machine(&ns, &machine)
                    .await
                    .filter(|dm| !dm.finalizers().is_empty())
            })
            .await;
            let acted = back.elapsed();
            eventually(Duration::from_secs(60), "the new machine provisioned", || async {
                env.docker_machine(&ns, &machine).await.filter(fully_provisioned)
            })
            .await;
            println!(
                "SIG{signal}: API server back after {:?}; new DockerMachine acted on {:?} after that (created at {:?}), provisioned {:?} after",
                back - down,
                acted,
                created,
                back.elapsed()
            );
            assert!(
                acted < Duration::from_secs(8),
                "SIG{signal}: a new object was acted on {acted:?} after the API server was back"
            );
        }
    })
    .await;
}
