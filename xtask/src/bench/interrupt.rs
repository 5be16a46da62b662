//! SIGINT (Ctrl-C) or SIGTERM (`kill`, `timeout`, a CI runner giving up), from the bench's start
//! to its end. The phase under way ends and cleans up after itself (its manager, containers,
//! network and namespace), and no later phase starts. Listening only during a phase lost a
//! signal that came during a cleanup, and SIGTERM was not heard at all: it killed the bench at
//! once and left its manager running, with its containers.
use anyhow::{Result, bail};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::watch,
};

#[derive(Clone)]
pub struct Interrupt(watch::Receiver<bool>);

impl Interrupt {
    /// Catch both signals from now on (this process no longer dies of them).
    pub fn listen() -> Result<Self> {
        let (tx, rx) = watch::channel(false);
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            let _ = tx.send(true);
        });
        Ok(Self(rx))
    }

    /// Resolves once a signal came (at once if one came already).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|came| *came).await;
    }

    /// An error once a signal came: nothing new starts.
    pub fn check(&self) -> Result<()> {
        if *self.0.borrow() {
            bail!("interrupted");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_sigterm_is_heard_and_stays_heard() {
        let interrupt = Interrupt::listen().unwrap();
        assert!(interrupt.check().is_ok());
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        tokio::time::timeout(Duration::from_secs(5), interrupt.wait())
            .await
            .expect("SIGTERM reaches the bench");
        assert!(interrupt.check().is_err(), "no later phase starts");
        tokio::time::timeout(Duration::from_secs(1), interrupt.wait())
            .await
            .expect("a signal that came already is not waited for again");
    }
}
