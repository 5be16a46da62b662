//! Project tasks that measure, report and plot: typed and tested here rather than in `hack/`
//! shell. The integration tests write their figures with the types of `xtask_figures` (a package
//! of its own, so that the tests need not depend on this one); the `xtask` binary turns them into
//! the tables and plots of `docs/performance.md` and `docs/faults.md`.
pub mod bench;
pub mod e2e_report;
pub mod soak;
pub mod target_prune;

/// The fault rows live with the other figures the tests write (`xtask_figures`); re-exported so
/// that `xtask faults-table` reads them under the same path as before.
pub use xtask_figures::faults;
