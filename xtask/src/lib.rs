//! Project tasks that measure, report and plot: typed and tested here rather than in `hack/`
//! shell. The integration tests write their figures with these types; the `xtask` binary turns
//! them into the README's table and plot.
pub mod bench;
pub mod e2e_report;
pub mod faults;
pub mod soak;
