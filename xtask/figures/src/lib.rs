//! What the integration tests and `xtask` share, in one definition, without the tests depending
//! on `xtask` (and so on its plotting and benchmarking dependencies): the figures the tests write
//! (fault rows, soak series) and that `xtask` turns into the README's table and plot, and the
//! load-balancer template that both the bench and the swap test give upstream CAPD.
pub mod faults;
pub mod soak;
pub mod upstream;
