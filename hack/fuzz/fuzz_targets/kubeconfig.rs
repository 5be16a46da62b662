//! Any bytes as a workload `<cluster>-kubeconfig` Secret value: a refusal or a client
//! configuration, never a panic, hang or unbounded allocation.
#![no_main]
use capd::controllers::workload::kubeconfig::{Endpoint, config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let endpoint = Endpoint {
        host: "172.18.0.3".into(),
        port: 6443,
    };
    let _ = config(Some(data), &endpoint);
});
