//! Project tasks that measure, report and plot: typed and tested here rather than in `hack/`
//! shell. The integration tests write their figures with these types; the `xtask` binary turns
//! them into the tables and plots of `docs/performance.md` and `docs/faults.md`.
pub mod bench;
pub mod e2e_report;
pub mod faults;
pub mod soak;
