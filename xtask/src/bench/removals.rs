//! The engine alone removing one network's running node containers, a given number at a time:
//! the measurement behind the engine adapter's removal cap (`MAX_REMOVALS` in
//! `src/docker/engine/mod.rs`). Each round provisions `n` floor machines (privileged node
//! containers, bootstrapped as a provider does) and removes them at one of the counts; the
//! counts' order rotates with the round, so that a drift of the machine (caches, other load)
//! falls on every count alike. A removal phase that does not end within the timeout is reported
//! as the engine hanging (Engine 20.10 deadlocked with 50 at once) and ends the measurement:
//! nothing after it would mean anything.
use std::{collections::HashMap, time::Duration};

use anyhow::{Context, Result};
use bollard::{
    Docker,
    query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder},
};

use super::{LABEL_KEY, floor::Floor, report::median};

pub struct Config {
    /// `unix:///path` of the engine.
    pub docker_host: String,
    /// The node image (the bench's light node).
    pub image: String,
    /// Containers per round.
    pub n: usize,
    /// Removals in flight, one count per round and phase.
    pub at_once: Vec<usize>,
    pub rounds: usize,
    /// How long one removal phase may take before the engine counts as hung.
    pub timeout: Duration,
}

/// One removal phase: `seconds` is `None` when it had not ended within the timeout.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub at_once: usize,
    pub seconds: Option<f64>,
}

/// The counts in the order round `round` (from 0) measures them: rotated by one each round.
pub fn order(at_once: &[usize], round: usize) -> Vec<usize> {
    let mut v = at_once.to_vec();
    if !v.is_empty() {
        let k = round % v.len();
        v.rotate_left(k);
    }
    v
}

/// One row per count: the rounds it ran, the median and range of their times, and whether the
/// engine hung at that count.
pub fn table(engine: &str, n: usize, at_once: &[usize], samples: &[Sample]) -> String {
    let mut out = format!(
        "{n} running node containers of one network removed by the engine alone ({engine})\n\n\
         | at once | rounds | median s | range s | hung |\n|---:|---:|---:|---|---|\n"
    );
    for &k in at_once {
        let times: Vec<f64> = samples
            .iter()
            .filter(|s| s.at_once == k)
            .filter_map(|s| s.seconds)
            .collect();
        let hung = samples
            .iter()
            .any(|s| s.at_once == k && s.seconds.is_none());
        let (med, range) = if times.is_empty() {
            ("–".to_string(), "–".to_string())
        } else {
            let lo = times.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = times.iter().copied().fold(0.0, f64::max);
            (format!("{:.1}", median(&times)), format!("{lo:.1}–{hi:.1}"))
        };
        let hung = if hung { "yes" } else { "no" };
        out += &format!("| {k} | {} | {med} | {range} | {hung} |\n", times.len());
    }
    out
}

/// What a run measured, and how its clean-up went.
pub struct Outcome {
    /// The engine's version and API version.
    pub engine: String,
    pub samples: Vec<Sample>,
    /// Why the containers or the network could not be removed afterwards: a finding too (Engine
    /// 20.10 refused the network, "has active endpoints", after 100 removals at once, moby#42119).
    /// `None` when everything went, or when the engine hung (then it is left for a look).
    pub clean_up_error: Option<String>,
}

/// Runs the rounds; every container and the network it made are removed at the end (unless the
/// engine hung, when it is left as it is for a look, with its label to clean up by).
pub async fn run(cfg: &Config) -> Result<Outcome> {
    let docker = Docker::connect_with_unix(
        cfg.docker_host.trim_start_matches("unix://"),
        120,
        bollard::API_DEFAULT_VERSION,
    )?
    .negotiate_version()
    .await
    .context("reach the engine")?;
    let engine = docker.version().await?;
    let engine = format!(
        "Engine {} API {}",
        engine.version.unwrap_or_default(),
        engine.api_version.unwrap_or_default()
    );
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .subsec_nanos();
    let id = format!("removals-{}-{nanos:x}", std::process::id());
    docker
        .create_network(bollard::models::NetworkCreateRequest {
            name: id.clone(),
            labels: Some(HashMap::from([(LABEL_KEY.to_string(), id.clone())])),
            ..Default::default()
        })
        .await?;
    let floor = Floor::new(&cfg.docker_host, &cfg.image, (LABEL_KEY, &id), &id)?;
    let mut samples = Vec::new();
    let measured = async {
        'rounds: for round in 0..cfg.rounds {
            for (phase, k) in order(&cfg.at_once, round).into_iter().enumerate() {
                let prefix = format!("{id}-{round}-{phase}");
                floor.provision(&prefix, cfg.n).await?;
                let removed = tokio::time::timeout(cfg.timeout, floor.remove(&prefix, cfg.n, k));
                let seconds = match removed.await {
                    Ok(took) => Some(took?.as_secs_f64()),
                    Err(_) => None,
                };
                eprintln!(
                    "round {round}: {} removed {k} at once: {seconds:?} s",
                    cfg.n
                );
                samples.push(Sample {
                    at_once: k,
                    seconds,
                });
                if seconds.is_none() {
                    break 'rounds;
                }
            }
        }
        anyhow::Ok(())
    }
    .await;
    let hung = samples.iter().any(|s| s.seconds.is_none());
    let clean_up_error = if hung {
        None
    } else {
        clean_up(&docker, &id)
            .await
            .err()
            .map(|e| format!("{e:#} (left behind: network {id})"))
    };
    measured?;
    Ok(Outcome {
        engine,
        samples,
        clean_up_error,
    })
}

async fn clean_up(docker: &Docker, id: &str) -> Result<()> {
    let label = format!("{LABEL_KEY}={id}");
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&HashMap::from([("label", vec![label.as_str()])]))
        .build();
    for c in docker.list_containers(Some(opts)).await? {
        if let Some(cid) = c.id {
            let rm = RemoveContainerOptionsBuilder::new()
                .force(true)
                .v(true)
                .build();
            docker.remove_container(&cid, Some(rm)).await?;
        }
    }
    docker.remove_network(id).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_count_leads_a_round_in_turn() {
        assert_eq!(order(&[4, 100], 0), vec![4, 100]);
        assert_eq!(order(&[4, 100], 1), vec![100, 4]);
        assert_eq!(order(&[4, 16, 100], 2), vec![100, 4, 16]);
        assert!(order(&[], 3).is_empty());
    }

    #[test]
    fn the_table_gives_median_range_and_a_hang() {
        let s = |at_once, seconds| Sample { at_once, seconds };
        let samples = [
            s(4, Some(9.0)),
            s(100, Some(10.0)),
            s(100, Some(8.0)),
            s(4, Some(7.0)),
            s(4, Some(6.0)),
            s(100, None),
        ];
        let t = table("Engine x", 100, &[4, 100], &samples);
        assert!(t.contains("| 4 | 3 | 7.0 | 6.0–9.0 | no |"), "{t}");
        assert!(t.contains("| 100 | 2 | 9.0 | 8.0–10.0 | yes |"), "{t}");
        assert!(t.contains("(Engine x)"), "{t}");
    }
}
