//! An in-memory [`ContainerRuntime`] for unit tests: records execs and image imports, answers
//! execs from a queue (then with success), can make every exec take a while, counts how many ran
//! at once, and can lack images. Like the engine adapter, it hands back only the tail of each
//! output stream.
use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;

use super::tail::{EXEC_OUTPUT_TAIL, TailBuffer};
use super::{
    AddressUse, ContainerInfo, ContainerRuntime, ContainerSpec, ExecOutput, HostCapacity,
    NetworkSpec, RuntimeError, RuntimeResult,
};

/// One exec: container, argv, stdin.
pub type Call = (String, Vec<String>, Option<Vec<u8>>);

#[derive(Default)]
pub struct FakeRuntime {
    calls: Mutex<Vec<Call>>,
    answers: Mutex<VecDeque<RuntimeResult<ExecOutput>>>,
    exec_delay: Duration,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
    /// (container, image) of every import, in order.
    imports: Mutex<Vec<(String, String)>>,
    missing_images: BTreeSet<String>,
    /// What `host_capacity` answers; `None` is an unavailable engine.
    capacity: Mutex<Option<HostCapacity>>,
}

impl FakeRuntime {
    pub fn answering(answers: Vec<RuntimeResult<ExecOutput>>) -> Self {
        FakeRuntime {
            answers: Mutex::new(answers.into()),
            ..Default::default()
        }
    }

    /// Every exec takes `delay` (to observe concurrency).
    pub fn slow(delay: Duration) -> Self {
        FakeRuntime {
            exec_delay: delay,
            ..Default::default()
        }
    }

    /// The same fake, every exec taking `delay`.
    pub fn slowed(mut self, delay: Duration) -> Self {
        self.exec_delay = delay;
        self
    }

    /// The same fake, without these images (their import is [`RuntimeError::Image`]).
    pub fn without_images(mut self, images: &[&str]) -> Self {
        self.missing_images = images.iter().map(|i| i.to_string()).collect();
        self
    }

    /// From now on, the host has this capacity (`None`: the engine cannot say).
    pub fn set_capacity(&self, capacity: Option<HostCapacity>) {
        *self.capacity.lock().unwrap() = capacity;
    }

    /// (container, image) of every image import so far.
    pub fn imports(&self) -> Vec<(String, String)> {
        self.imports.lock().unwrap().clone()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The most execs that were in flight at the same moment.
    pub fn most_at_once(&self) -> usize {
        self.most_at_once.load(Ordering::SeqCst)
    }
}

fn tail(stream: &[u8]) -> Vec<u8> {
    let mut kept = TailBuffer::new(EXEC_OUTPUT_TAIL);
    kept.push(stream);
    kept.into_vec()
}

#[async_trait]
impl ContainerRuntime for FakeRuntime {
    async fn ping(&self) -> RuntimeResult<()> {
        Ok(())
    }
    async fn host_capacity(&self) -> RuntimeResult<HostCapacity> {
        self.capacity
            .lock()
            .unwrap()
            .ok_or_else(|| RuntimeError::Unavailable("fake engine without capacity".into()))
    }
    async fn ensure_network(&self, _: &NetworkSpec) -> RuntimeResult<()> {
        Ok(())
    }
    async fn address_use(&self, _: &str, _: std::net::IpAddr) -> RuntimeResult<AddressUse> {
        Ok(AddressUse::OffNetwork)
    }
    async fn inspect(&self, _: &str) -> RuntimeResult<Option<ContainerInfo>> {
        Ok(None)
    }
    async fn list(&self, _: &BTreeMap<String, String>) -> RuntimeResult<Vec<ContainerInfo>> {
        Ok(Vec::new())
    }
    async fn ensure_image(&self, _: &str) -> RuntimeResult<()> {
        Ok(())
    }
    async fn create_and_start(&self, _: &ContainerSpec) -> RuntimeResult<ContainerInfo> {
        Ok(ContainerInfo::default())
    }
    async fn start(&self, _: &str) -> RuntimeResult<()> {
        Ok(())
    }
    async fn remove(&self, _: &str) -> RuntimeResult<()> {
        Ok(())
    }
    async fn exec(
        &self,
        name: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
    ) -> RuntimeResult<ExecOutput> {
        self.calls.lock().unwrap().push((
            name.to_string(),
            argv.to_vec(),
            stdin.map(<[u8]>::to_vec),
        ));
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        if !self.exec_delay.is_zero() {
            tokio::time::sleep(self.exec_delay).await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        let answer = self.answers.lock().unwrap().pop_front();
        answer
            .unwrap_or_else(|| Ok(ExecOutput::default()))
            .map(|out| ExecOutput {
                exit_code: out.exit_code,
                stdout: tail(&out.stdout),
                stderr: tail(&out.stderr),
            })
    }
    async fn file_exists(&self, _: &str, _: &str) -> RuntimeResult<bool> {
        Ok(false)
    }
    async fn read_file(&self, _: &str, _: &str, _: u64) -> RuntimeResult<Option<Vec<u8>>> {
        Ok(None)
    }
    async fn write_file(&self, _: &str, _: &str, _: &[u8]) -> RuntimeResult<()> {
        Ok(())
    }
    async fn kill(&self, _: &str, _: &str) -> RuntimeResult<()> {
        Ok(())
    }
    async fn image_present(&self, image: &str) -> RuntimeResult<bool> {
        Ok(!self.missing_images.contains(image))
    }
    async fn import_image(
        &self,
        name: &str,
        image: &str,
        _: &[String],
    ) -> RuntimeResult<ExecOutput> {
        if self.missing_images.contains(image) {
            return Err(RuntimeError::Image {
                image: image.to_string(),
                message: "No such image".into(),
            });
        }
        self.imports
            .lock()
            .unwrap()
            .push((name.to_string(), image.to_string()));
        if !self.exec_delay.is_zero() {
            tokio::time::sleep(self.exec_delay).await;
        }
        Ok(ExecOutput::default())
    }
}
