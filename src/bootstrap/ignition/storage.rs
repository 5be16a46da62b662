//! `storage`: files, directories and links.
use super::*;
use crate::bootstrap::limits::Decoded;

/// `user`/`group` objects (`{id}` or `{name}`) as a chown spec; `None` when root or unset.
pub(super) fn owner(m: &Map<String, Value>, loc: &str) -> Result<Option<String>, BootstrapError> {
    let part = |key: &str| -> Result<Option<String>, BootstrapError> {
        let Some(o) = object(m.get(key), loc)? else {
            return Ok(None);
        };
        if let Some(name) = string(o, "name", loc)?.filter(|n| !n.is_empty()) {
            return Ok(Some(name.to_string()));
        }
        match o.get("id") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(Some(n.to_string())),
            Some(other) => Err(invalid(
                loc,
                format!(
                    "{key}.id must be a non-negative integer, found {}",
                    kind(other)
                ),
            )),
        }
    };
    let is_root = |p: &Option<String>| matches!(p.as_deref(), None | Some("root" | "0"));
    let (user, group) = (part("user")?, part("group")?);
    if is_root(&user) && is_root(&group) {
        return Ok(None);
    }
    Ok(Some(match (user, group) {
        (Some(u), Some(g)) => format!("{u}:{g}"),
        (Some(u), None) => u,
        (None, Some(g)) => format!(":{g}"),
        (None, None) => unreachable!("both root handled above"),
    }))
}

/// `mode`: an integer (the usual JSON form, e.g. 420 for 0644) or an octal string (from YAML).
pub(super) fn mode(m: &Map<String, Value>, loc: &str) -> Result<Option<u32>, BootstrapError> {
    let mode = match m.get("mode") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => u64::from_str_radix(s.trim().trim_start_matches("0o"), 8).ok(),
        Some(other) => {
            return Err(invalid(
                loc,
                format!("mode must be a number, found {}", kind(other)),
            ));
        }
    };
    match mode {
        Some(m) if m <= 0o7777 => Ok(Some(m as u32)),
        _ => Err(invalid(loc, "mode is not a file mode between 0 and 0o7777")),
    }
}

/// A resource (`contents` or an `append` item): inline `data:` source, optional gzip. Its
/// decoded size is spent from the plan's budget for all files.
pub(super) fn resource(
    r: &Map<String, Value>,
    loc: &str,
    budget: &mut Decoded,
) -> Result<Vec<u8>, BootstrapError> {
    let bytes = match string(r, "source", loc)? {
        None | Some("") => Vec::new(),
        Some(src) => decode::data_url(src).map_err(|e| invalid(loc, e))?,
    };
    let bytes = match string(r, "compression", loc)? {
        None | Some("") => bytes,
        Some("gzip") => decode::gunzip(&bytes, budget.left()).map_err(|e| invalid(loc, e))?,
        Some(other) => {
            return Err(invalid(
                loc,
                format!(
                    "unsupported compression {:?} (supported: gzip)",
                    shorten(other, 16)
                ),
            ));
        }
    };
    budget.spend(bytes.len()).map_err(|e| invalid(loc, e))?;
    Ok(bytes)
}

pub(super) fn file(
    plan: &mut Plan,
    i: usize,
    v: &Value,
    options: &NodeOptions,
) -> Result<(), BootstrapError> {
    let base = format!("storage.files[{i}]");
    let m = entry(v, &base)?;
    let path = normalize_path(string(m, "path", &base)?.unwrap_or(""))
        .map_err(|e| invalid(base.clone(), e))?;
    let loc = format!("{base} ({})", display_path(&path));
    if let Some(fs) = string(m, "filesystem", &loc)?.filter(|fs| *fs != "root") {
        return Err(invalid(
            loc,
            format!(
                "filesystem {:?} is not supported (only root)",
                shorten(fs, 32)
            ),
        ));
    }

    let fix = |bytes: Vec<u8>| {
        if path == KUBEADM_SH {
            kubeadm_sh(bytes)
        } else {
            bytes
        }
    };
    // v2: `append: true` appends `contents`; v3: `append` is a list of extra resources.
    let (append_contents, mut appends): (bool, &[Value]) = match m.get("append") {
        None | Some(Value::Null) => (false, &[]),
        Some(Value::Bool(b)) => (*b, &[]),
        Some(Value::Array(a)) => (false, a),
        Some(other) => {
            return Err(invalid(
                loc,
                format!(
                    "append must be a boolean or an array, found {}",
                    kind(other)
                ),
            ));
        }
    };
    match object(m.get("contents"), &loc)? {
        // CABPK's kubeadm config, rewritten for a kind-style node. Its whole content is known only
        // when `contents` replaces the file: v3 append fragments are folded in first, so the
        // rewrite sees what kubeadm will read. A pure append is left alone.
        Some(contents) if !append_contents && kubeadm::is_config_path(FORMAT, &path) => {
            let mut bytes = resource(contents, &loc, &mut plan.decoded)?;
            for (j, a) in appends.iter().enumerate() {
                let aloc = format!("{loc} append[{j}]");
                bytes.extend(resource(entry(a, &aloc)?, &aloc, &mut plan.decoded)?);
            }
            appends = &[];
            plan.write_file(&path, kubeadm::rewrite(&loc, &bytes, options)?, false);
        }
        Some(contents) => {
            let bytes = resource(contents, &loc, &mut plan.decoded)?;
            plan.write_file(&path, fix(bytes), append_contents);
        }
        // No contents and nothing to append: create the file if missing, keep it if present.
        None if appends.is_empty() => plan.write_file(&path, Vec::new(), true),
        None => {}
    }
    for (j, a) in appends.iter().enumerate() {
        let aloc = format!("{loc} append[{j}]");
        let bytes = resource(entry(a, &aloc)?, &aloc, &mut plan.decoded)?;
        plan.write_file(&path, fix(bytes), true);
    }
    if let Some(mode) = mode(m, &loc)? {
        plan.chmod(&path, mode);
    }
    if let Some(owner) = owner(m, &loc)? {
        plan.chown(&path, &owner);
    }
    Ok(())
}

pub(super) fn directory(plan: &mut Plan, i: usize, v: &Value) -> Result<(), BootstrapError> {
    let base = format!("storage.directories[{i}]");
    let m = entry(v, &base)?;
    let raw = string(m, "path", &base)?.unwrap_or("").trim();
    let trimmed = raw.trim_end_matches('/');
    if trimmed.is_empty() && raw.starts_with('/') {
        return Ok(()); // "/" itself
    }
    let path = normalize_path(trimmed).map_err(|e| invalid(base.clone(), e))?;
    let loc = format!("{base} ({})", display_path(&path));
    plan.mkdir_p(&path);
    if let Some(mode) = mode(m, &loc)? {
        plan.chmod(&path, mode);
    }
    if let Some(owner) = owner(m, &loc)? {
        plan.chown(&path, &owner);
    }
    Ok(())
}

pub(super) fn link(plan: &mut Plan, i: usize, v: &Value) -> Result<(), BootstrapError> {
    let base = format!("storage.links[{i}]");
    let m = entry(v, &base)?;
    let path = normalize_path(string(m, "path", &base)?.unwrap_or(""))
        .map_err(|e| invalid(base.clone(), e))?;
    let loc = format!("{base} ({})", display_path(&path));
    let target = match string(m, "target", &loc)? {
        Some(t) if !t.trim().is_empty() => t.to_string(),
        _ => return Err(invalid(loc, "missing target")),
    };
    let hard = boolean(m, "hard", &loc)?.unwrap_or(false);
    plan.mkdir_p(crate::bootstrap::plan::parent(&path));
    let flags = if hard { "-fn" } else { "-sfn" };
    plan.command(vec!["ln".into(), flags.into(), target, path.clone()]);
    if let Some(owner) = owner(m, &loc)? {
        plan.command(vec!["chown".into(), "-h".into(), owner, path]);
    }
    Ok(())
}

/// Upstream's `/etc/kubeadm.sh` fix: every line running `kubeadm init` or `kubeadm join` gets
/// ` --ignore-preflight-errors=all` at its end. Non-UTF-8 content is left alone.
pub(super) fn kubeadm_sh(bytes: Vec<u8>) -> Vec<u8> {
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => return e.into_bytes(),
    };
    text.split('\n')
        .map(|line| {
            if line.contains("kubeadm init") || line.contains("kubeadm join") {
                format!("{line}{KUBEADM_SH_FLAG}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
}
