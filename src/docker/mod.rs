//! Everything that talks to (or describes things for) the Docker Engine.
//!
//! Only [`engine`] knows about bollard; the controllers see the [`ContainerRuntime`] trait, which
//! lets pure decision code be unit-tested with an in-memory fake.
pub mod adoption;
pub mod engine;
pub mod events;
#[cfg(test)]
pub mod fake;
pub mod haproxy;
pub mod haproxy_template;
pub mod host_paths;
pub mod image;
pub mod kind_images;
pub mod labels;
pub mod naming;
pub mod runtime;
pub mod specs;
pub mod tail;

pub use runtime::*;
