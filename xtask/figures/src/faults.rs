//! The fault matrix's rows: each fault test (`tests/faults.rs`) writes one, `xtask faults-table`
//! prints them as the table `docs/faults.md` carries.
use std::{fs, io, path::Path};

use serde::{Deserialize, Serialize};

/// What one fault did to a running cluster of light machines, and how long recovery took.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Short name, e.g. "API server killed".
    pub fault: String,
    /// The moment the figures are measured from, in words ("the API server answers again").
    pub measured_from: String,
    /// Seconds from that moment until the manager acted on a DockerMachine created then (its
    /// finalizer was added).
    pub acted_s: Option<f64>,
    /// Seconds from that moment until every object was Ready again with its container running
    /// (None: not within the test's bound).
    pub ready_s: Option<f64>,
    /// What the fault cost that the manager did not bring back (containers recreated, status or
    /// finalizers gone). Losses the fault itself caused by design are in `user_sees`.
    pub lost: Vec<String>,
    /// Objects with more than one container.
    pub duplicated: Vec<String>,
    /// Containers or finalizers left once everything was deleted.
    pub leaked: Vec<String>,
    /// What a user watching the objects sees meanwhile.
    pub user_sees: String,
    /// Other figures of this fault, e.g. ("Lease taken over", 15.2).
    pub extra: Vec<(String, f64)>,
}

impl Row {
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        let lower = self.fault.to_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let file = words.join("-");
        let json = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        fs::write(dir.join(format!("{file}.json")), json)
    }

    /// Whether the fault met the goals: acted on within `act_goal_s`, Ready again, nothing lost,
    /// duplicated or leaked.
    pub fn meets(&self, act_goal_s: f64) -> bool {
        self.acted_s.is_some_and(|s| s <= act_goal_s)
            && self.ready_s.is_some()
            && self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.leaked.is_empty()
    }
}

/// Every row in `dir`, in file-name order.
pub fn read_rows(dir: &Path) -> io::Result<Vec<Row>> {
    let mut paths: Vec<_> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = fs::read_to_string(p)?;
            serde_json::from_str(&text)
                .map_err(|e| io::Error::other(format!("{}: {e}", p.display())))
        })
        .collect()
}

fn secs(s: Option<f64>) -> String {
    s.map_or_else(|| "—".to_string(), |s| format!("{s:.1} s"))
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items.join("; ")
    }
}

/// The Markdown table: fault, what the figures count from, time to act on a new object, time to
/// every object Ready, what was lost, duplicated or leaked, what the user sees.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| fault | measured from | new object acted on | all Ready again | lost / duplicated / leaked | what the user sees |\n\
         |---|---|---:|---:|---|---|\n",
    );
    for r in rows {
        let mut from = r.measured_from.clone();
        for (what, s) in &r.extra {
            from.push_str(&format!("; {what}: {s:.1} s"));
        }
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} / {} / {} | {} |\n",
            r.fault,
            from,
            secs(r.acted_s),
            secs(r.ready_s),
            list(&r.lost),
            list(&r.duplicated),
            list(&r.leaked),
            r.user_sees
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row {
        Row {
            fault: "API server killed".into(),
            measured_from: "the API server answers again".into(),
            acted_s: Some(1.25),
            ready_s: Some(2.0),
            user_sees: "nothing".into(),
            ..Row::default()
        }
    }

    /// The table's home is `docs/faults.md` (it left the README): a change of its columns must
    /// reach that page too, or the page shows a table this task no longer prints.
    #[test]
    fn the_docs_page_carries_this_table() {
        let page = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/faults.md");
        let page = fs::read_to_string(page).expect("docs/faults.md");
        let header = table(&[]);
        assert!(page.contains(&header), "docs/faults.md lacks:\n{header}");
    }

    #[test]
    fn table_has_a_line_per_row_with_its_figures() {
        let mut slow = row();
        slow.fault = "Leader failover".into();
        slow.acted_s = None;
        slow.leaked = vec!["container c-m1".into()];
        slow.extra = vec![("Lease taken over".into(), 15.04)];
        let t = table(&[row(), slow]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[2].contains("| 1.2 s | 2.0 s | nothing / nothing / nothing |"),
            "{t}"
        );
        assert!(lines[3].contains("Lease taken over: 15.0 s"), "{t}");
        assert!(lines[3].contains("| — |"), "{t}");
        assert!(
            lines[3].contains("nothing / nothing / container c-m1"),
            "{t}"
        );
    }

    #[test]
    fn goals_need_every_figure() {
        assert!(row().meets(5.0));
        assert!(!row().meets(1.0), "acted too late");
        let mut r = row();
        r.ready_s = None;
        assert!(!r.meets(5.0), "never Ready again");
        let mut r = row();
        r.duplicated = vec!["c-m0".into()];
        assert!(!r.meets(5.0), "a duplicate");
    }

    #[test]
    fn rows_round_trip_through_their_files() {
        let dir = std::env::temp_dir().join(format!("xtask-faults-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        row().write(&dir).unwrap();
        assert!(dir.join("api-server-killed.json").exists());
        assert_eq!(read_rows(&dir).unwrap(), vec![row()]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
