//! `systemd`: units and drop-ins written, then enabled, masked or started.
use super::*;

/// A unit or drop-in name: a plain file name.
pub(super) fn unit_name(name: Option<&str>, loc: &str) -> Result<String, BootstrapError> {
    match name.map(str::trim) {
        None | Some("") => Err(invalid(loc, "missing name")),
        Some(n) if n.contains('/') || n == "." || n == ".." || n.contains('\0') => Err(invalid(
            loc,
            format!("name {} must be a plain file name", display_path(n)),
        )),
        Some(n) => Ok(n.to_string()),
    }
}

pub(super) fn units(plan: &mut Plan, units: &[Value]) -> Result<(), BootstrapError> {
    if units.is_empty() {
        return Ok(());
    }
    let mut enable = Vec::new();
    let mut mask = Vec::new();
    for (i, v) in units.iter().enumerate() {
        let base = format!("systemd.units[{i}]");
        let m = entry(v, &base)?;
        let name = unit_name(string(m, "name", &base)?, &base)?;
        let loc = format!("{base} ({})", display_path(&name));
        if let Some(contents) = string(m, "contents", &loc)? {
            plan.write_file(
                &format!("{UNIT_DIR}/{name}"),
                contents.as_bytes().to_vec(),
                false,
            );
        }
        for (j, d) in array(m.get("dropins"), &loc)?.iter().enumerate() {
            let dloc = format!("{loc} dropins[{j}]");
            let d = entry(d, &dloc)?;
            let dname = unit_name(string(d, "name", &dloc)?, &dloc)?;
            if let Some(contents) = string(d, "contents", &dloc)? {
                plan.write_file(
                    &format!("{UNIT_DIR}/{name}.d/{dname}"),
                    contents.as_bytes().to_vec(),
                    false,
                );
            }
        }
        // v2 spells it `enable` (deprecated) or `enabled`; v3 `enabled`.
        let enabled = boolean(m, "enabled", &loc)?.or(boolean(m, "enable", &loc)?);
        if boolean(m, "mask", &loc)? == Some(true) {
            mask.push(name);
        } else if enabled == Some(true) {
            enable.push(name);
        }
    }
    plan.command(vec!["systemctl".into(), "daemon-reload".into()]);
    for name in mask {
        plan.command(vec!["systemctl".into(), "mask".into(), name]);
    }
    for name in enable {
        plan.command(vec![
            "systemctl".into(),
            "enable".into(),
            "--now".into(),
            name,
        ]);
    }
    Ok(())
}
