//! The one parser of image references: `[registry[:port]/]path[:tag][@digest]`.

/// An image reference split into its parts (borrowed from the string it was parsed from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageRef<'a> {
    /// Registry and path, e.g. `reg:5000/kindest/haproxy`.
    pub name: &'a str,
    pub tag: Option<&'a str>,
    /// e.g. `sha256:…`, without the `@`.
    pub digest: Option<&'a str>,
}

impl<'a> ImageRef<'a> {
    pub fn parse(image: &'a str) -> Self {
        let (path, digest) = match image.split_once('@') {
            Some((p, d)) => (p, Some(d)),
            None => (image, None),
        };
        // A `:` after the last `/` starts the tag; one before it is a registry port.
        let slash = path.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match path[slash..].rfind(':') {
            Some(i) => (&path[..slash + i], Some(&path[slash + i + 1..])),
            None => (path, None),
        };
        ImageRef { name, tag, digest }
    }

    /// The last path component (`haproxy` of `kindest/haproxy:v1`).
    pub fn short_name(&self) -> &'a str {
        self.name.rsplit('/').next().unwrap_or(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(s: &str) -> (&str, Option<&str>, Option<&str>) {
        let r = ImageRef::parse(s);
        (r.name, r.tag, r.digest)
    }

    #[test]
    fn registry_ports_tags_and_digests() {
        assert_eq!(parts("busybox"), ("busybox", None, None));
        assert_eq!(
            parts("kindest/haproxy:v1"),
            ("kindest/haproxy", Some("v1"), None)
        );
        assert_eq!(parts("reg:5000/a/b"), ("reg:5000/a/b", None, None));
        assert_eq!(parts("reg:5000/a/b:t"), ("reg:5000/a/b", Some("t"), None));
        assert_eq!(parts("a@sha256:00"), ("a", None, Some("sha256:00")));
        assert_eq!(parts("a:t@sha256:00"), ("a", Some("t"), Some("sha256:00")));
        assert_eq!(
            ImageRef::parse("reg:5000/kindest/haproxy:v1").short_name(),
            "haproxy"
        );
    }
}
