//! Inputs that both `xtask bench` and the swap test (`tests/swap.rs`) give upstream CAPD. Not
//! figures, but shared by the same two sides for the same reason: one definition, without the
//! tests depending on `xtask`.

/// An haproxy.cfg template for upstream's load balancer, in its template language (Go
/// `text/template` over its ConfigData: the frontend and backend ports, the backend servers
/// with address and weight). Upstream's own default asks for `maxconn 100000`, for which
/// haproxy wants about 200k file descriptors; containers here get 20000 (the host's hard
/// limit, which even root cannot raise without CAP_SYS_RESOURCE), so its load balancer dies on
/// the first reload and no control plane ever answers through it. capd-rs's generated config
/// copes (`no strict-limits`); upstream gets this through its own
/// `customHAProxyConfigTemplateRef`, with the same listeners, checks and resolver.
pub const UPSTREAM_HAPROXY_TEMPLATE: &str = r#"global
  log stdout format raw local0
  daemon
  # About two descriptors per connection, within the container's 20000.
  maxconn 8000

resolvers docker
  nameserver dns 127.0.0.11:53

defaults
  log global
  mode tcp
  timeout connect 5s
  timeout client 50s
  timeout server 50s
  default-server init-addr none

frontend control-plane
  bind *:{{ .FrontendControlPlanePort }}
  default_backend kube-apiservers

backend kube-apiservers
  option httpchk GET /healthz
{{- range $name, $server := .BackendServers }}
  server {{ $name }} {{ $server.Address }}:{{ $.BackendControlPlanePort }} weight {{ $server.Weight }} check check-ssl verify none resolvers docker resolve-prefer ipv4
{{- end }}
"#;
