//! Container names, kept identical to upstream CAPD so CAPI's e2e framework and log collectors
//! (which exec into `<cluster>-lb` and `<cluster>-<machine>`) keep working.

/// The load balancer of a cluster: `<cluster>-lb`.
pub fn load_balancer_name(cluster: &str) -> String {
    format!("{cluster}-lb")
}

/// A node container: the machine name as is when it already starts with the cluster name
/// (KCP and MachineSets name machines `<cluster>-...`), otherwise `<cluster>-<machine>`.
pub fn machine_container_name(cluster: &str, machine: &str) -> String {
    if machine.starts_with(cluster) {
        machine.to_string()
    } else {
        format!("{cluster}-{machine}")
    }
}

/// `spec.providerID` of a DockerMachine: `docker:////<container>` (four slashes, as upstream).
pub fn provider_id(container: &str) -> String {
    format!("docker:////{container}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_upstream_rules() {
        assert_eq!(load_balancer_name("dev"), "dev-lb");
        assert_eq!(
            machine_container_name("dev", "dev-md-0-abcde"),
            "dev-md-0-abcde"
        );
        assert_eq!(machine_container_name("dev", "worker-1"), "dev-worker-1");
        // Plain prefix, no dash check, as upstream.
        assert_eq!(machine_container_name("dev", "developer"), "developer");
        assert_eq!(provider_id("dev-cp-1"), "docker:////dev-cp-1");
    }
}
