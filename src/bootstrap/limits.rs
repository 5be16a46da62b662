//! What bootstrap data may cost to read: its size, how far YAML aliases may expand it, and how
//! much file content it may decode to. Each bound refuses the data with an error that names the
//! bound, never the content, before the memory is spent.
use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

use super::{BootstrapError, Format};

/// The largest bootstrap data accepted: 1 MiB, the API server's limit for a whole Secret. CAPI's
/// bootstrap providers write the data into a Secret, so nothing larger can come from them; the
/// bound only matters when the manager is handed data some other way (tests, fuzzing), and it
/// bounds everything proportional to the input below.
pub const MAX_DATA_BYTES: usize = 1024 * 1024;

/// The most YAML nodes (scalars, sequences, mappings, counted with aliases expanded) a document
/// may have. CABPK's data has a few hundred; each node costs the parser about a hundred bytes.
pub const MAX_YAML_NODES: u64 = 100_000;

/// Scalars may add up, with aliases expanded, to the document's own length plus this: without
/// aliases a scalar is never longer than its text, so only aliases can go past it.
const SCALAR_SLACK: u64 = 64 * 1024;

/// The file content of one plan, decoded (base64, gzip, `data:` URLs), adds up to at most this:
/// 16 MiB, sixteen times the largest Secret. Real configuration compresses a few times at most;
/// a gzip bomb, or many files each under any per-file bound, stops here.
pub const MAX_DECODED_BYTES: u64 = 16 * 1024 * 1024;

pub(crate) fn check_size(format: Format, data: &[u8]) -> Result<(), BootstrapError> {
    if data.len() > MAX_DATA_BYTES {
        return Err(BootstrapError::TooLarge {
            format,
            size: data.len(),
            limit: MAX_DATA_BYTES,
        });
    }
    Ok(())
}

/// Refuse a YAML document that expands (aliases replayed) past [`MAX_YAML_NODES`] nodes or past
/// its own length in scalar text. A first pass walks the document without building it, so a
/// "billion laughs" costs the walk up to the bound, not the expansion. The outer `Err` is the
/// refusal; the inner one is the parser's message for a document that does not parse (the
/// caller reports it as a syntax error, and builds nothing).
pub(crate) fn check_yaml_expansion(
    format: Format,
    text: &str,
) -> Result<Result<(), String>, BootstrapError> {
    let budget = Budget {
        nodes: Cell::new(MAX_YAML_NODES),
        bytes: Cell::new(text.len() as u64 + SCALAR_SLACK),
        exhausted: Cell::new(false),
    };
    match Count(&budget).deserialize(serde_yaml_ng::Deserializer::from_str(text)) {
        Ok(()) => Ok(Ok(())),
        // The parser's own bound on alias replays (its error has no kind to match on): the
        // same refusal as ours.
        Err(e) if budget.exhausted.get() || e.to_string().contains("repetition limit") => {
            Err(BootstrapError::Expands {
                format,
                nodes: MAX_YAML_NODES,
                bytes: text.len() as u64 + SCALAR_SLACK,
            })
        }
        Err(e) => Ok(Err(e.to_string())),
    }
}

struct Budget {
    nodes: Cell<u64>,
    bytes: Cell<u64>,
    exhausted: Cell<bool>,
}

/// Walks any document, spending the budget per node and per scalar byte.
#[derive(Clone, Copy)]
struct Count<'a>(&'a Budget);

impl Count<'_> {
    fn spend<E: de::Error>(self, bytes: usize) -> Result<(), E> {
        let b = self.0;
        match (
            b.nodes.get().checked_sub(1),
            b.bytes.get().checked_sub(bytes as u64),
        ) {
            (Some(nodes), Some(left)) => {
                b.nodes.set(nodes);
                b.bytes.set(left);
                Ok(())
            }
            _ => {
                b.exhausted.set(true);
                Err(E::custom("the document expands past its bound"))
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Count<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Count<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.spend(0)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.spend(0)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.spend(0)
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        self.spend(0)
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        self.spend(0)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.spend(0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.spend(v.len())
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<(), E> {
        self.spend(v.len())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.spend(0)
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.spend(0)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.spend(0)?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.spend(0)?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
    /// A tagged node (`!tag value`): the tag, then its value.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        let ((), variant) = data.variant_seed(self)?;
        variant.newtype_variant_seed(self)
    }
}

/// What is left of a plan's [`MAX_DECODED_BYTES`].
#[derive(Debug)]
pub(crate) struct Decoded {
    left: u64,
}

impl Default for Decoded {
    fn default() -> Self {
        Decoded {
            left: MAX_DECODED_BYTES,
        }
    }
}

impl Decoded {
    /// How many more bytes a decoder may produce.
    pub(crate) fn left(&self) -> u64 {
        self.left
    }

    /// Count `n` decoded bytes of file content against the plan's budget.
    pub(crate) fn spend(&mut self, n: usize) -> Result<(), String> {
        match self.left.checked_sub(n as u64) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(over_budget()),
        }
    }
}

pub(crate) fn over_budget() -> String {
    format!(
        "the content of all files adds up to more than {} MiB once decoded",
        MAX_DECODED_BYTES / (1024 * 1024)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::{NodeOptions, commands};

    /// Each level is ten aliases of the one before: `l9` is a billion `lol`s.
    fn laughs(levels: usize) -> String {
        let mut doc = String::from("a0: &l0 [lol]\n");
        for i in 1..levels {
            let prev = format!("*l{}", i - 1);
            let items = [prev.as_str(); 10].join(", ");
            doc.push_str(&format!("a{i}: &l{i} [{items}]\n"));
        }
        doc
    }

    #[test]
    fn billion_laughs_is_refused_naming_the_bound() {
        let doc = laughs(10);
        assert!(doc.len() < 1024);
        let err = check_yaml_expansion(Format::CloudConfig, &doc).unwrap_err();
        assert!(matches!(err, BootstrapError::Expands { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("aliases") && msg.contains("100000"), "{msg}");
        assert!(!msg.contains("lol"), "{msg}");
    }

    #[test]
    fn one_long_scalar_aliased_many_times_is_refused() {
        // Few nodes, many bytes: 100 KB of text aliased 50 times.
        let mut doc = format!("a: &x \"{}\"\nb: [", "y".repeat(100_000));
        doc.push_str(&vec!["*x"; 50].join(", "));
        doc.push_str("]\n");
        let err = check_yaml_expansion(Format::Ignition, &doc).unwrap_err();
        assert!(matches!(err, BootstrapError::Expands { .. }), "{err:?}");
    }

    #[test]
    fn ordinary_documents_and_modest_aliases_pass() {
        for doc in [
            include_str!("testdata/cabpk-init.yaml"),
            include_str!("testdata/cabpk-join.yaml"),
            include_str!("testdata/cabpk-ignition-v2.json"),
            "base: &b {owner: root, permissions: '0644'}\nwrite_files:\n- {<<: *b, path: /a}\n- {path: /b, x: *b}\n",
            "!tagged [a, !t b]",
            "",
            "not: [valid",
            "--- a\n--- b\n",
        ] {
            check_yaml_expansion(Format::CloudConfig, doc).unwrap().ok();
        }
        // A long document without aliases stays under the bound whatever its shape.
        let flat = format!("[{}]", vec!["\"some text\""; 50_000].join(","));
        check_yaml_expansion(Format::CloudConfig, &flat)
            .unwrap()
            .unwrap();
    }

    #[test]
    fn data_size_is_bounded() {
        check_size(Format::CloudConfig, &vec![b' '; MAX_DATA_BYTES]).unwrap();
        let err = check_size(Format::Ignition, &vec![b' '; MAX_DATA_BYTES + 1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ignition bootstrap data is 1048577 bytes, more than the 1048576 bytes (1 MiB) accepted"
        );
    }

    fn gz_b64(len: usize) -> String {
        use crate::bootstrap::decode::{b64, gzip};
        b64(&gzip(&vec![0u8; len]))
    }

    #[test]
    fn many_gzip_files_share_one_budget_in_cloud_config() {
        // Five files of 4 MiB each: every one far under any per-file bound, 20 MiB together.
        let mut doc = String::from("write_files:\n");
        for i in 0..5 {
            doc.push_str(&format!(
                "- path: /f{i}\n  encoding: gz+b64\n  content: {}\n",
                gz_b64(4 << 20)
            ));
        }
        assert!(doc.len() < 64 * 1024);
        let err =
            commands(Format::CloudConfig, doc.as_bytes(), &NodeOptions::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "write_files[4] (/f4): the content of all files adds up to more than 16 MiB once decoded"
        );
        // One file that is a bomb by itself stops at the bound too.
        let bomb = format!(
            "write_files:\n- path: /b\n  encoding: gzip+base64\n  content: {}\n",
            gz_b64(20 << 20)
        );
        let err = commands(
            Format::CloudConfig,
            bomb.as_bytes(),
            &NodeOptions::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("more than 16 MiB"), "{err}");
        // Four of them fit.
        doc.truncate(doc.rfind("- path: /f4").unwrap());
        commands(Format::CloudConfig, doc.as_bytes(), &NodeOptions::default()).unwrap();
    }

    #[test]
    fn many_gzip_files_share_one_budget_in_ignition() {
        let file = |i: usize| {
            serde_json::json!({"path": format!("/f{i}"), "contents": {
                "compression": "gzip", "source": format!("data:;base64,{}", gz_b64(4 << 20))}})
        };
        let doc = serde_json::json!({"ignition": {"version": "3.2.0"},
            "storage": {"files": (0..5).map(file).collect::<Vec<_>>()}});
        let err = commands(
            Format::Ignition,
            doc.to_string().as_bytes(),
            &NodeOptions::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "storage.files[4] (/f4): the content of all files adds up to more than 16 MiB once decoded"
        );
    }

    #[test]
    fn alias_bombs_are_refused_by_both_parsers() {
        let doc = format!("{}runcmd: [echo]\n", laughs(9));
        let err =
            commands(Format::CloudConfig, doc.as_bytes(), &NodeOptions::default()).unwrap_err();
        assert!(
            matches!(
                err,
                BootstrapError::Expands {
                    format: Format::CloudConfig,
                    ..
                }
            ),
            "{err:?}"
        );
        let doc = format!("{}ignition: {{version: 3.2.0}}\n", laughs(9));
        let err = commands(Format::Ignition, doc.as_bytes(), &NodeOptions::default()).unwrap_err();
        assert!(
            matches!(
                err,
                BootstrapError::Expands {
                    format: Format::Ignition,
                    ..
                }
            ),
            "{err:?}"
        );
        let big = vec![b'#'; MAX_DATA_BYTES + 1];
        let err = commands(Format::CloudConfig, &big, &NodeOptions::default()).unwrap_err();
        assert!(matches!(err, BootstrapError::TooLarge { .. }), "{err:?}");
    }

    #[test]
    fn decoded_budget_is_spent_across_files() {
        let mut d = Decoded::default();
        d.spend(10 << 20).unwrap();
        assert_eq!(d.left(), 6 << 20);
        d.spend(6 << 20).unwrap();
        assert!(d.spend(1).unwrap_err().contains("more than 16 MiB"));
    }
}
