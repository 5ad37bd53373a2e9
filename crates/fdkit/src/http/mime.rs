//! [`content_type`]: the `Content-Type` for a file name, by extension (case-insensitive).

/// The media type for `name`'s extension; `application/octet-stream` when unknown.
pub fn content_type(name: &[u8]) -> &'static str {
    let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    let Some(dot) = base.iter().rposition(|&b| b == b'.') else {
        return DEFAULT;
    };
    let ext = &base[dot + 1..];
    if ext.is_empty() || ext.len() > 8 {
        return DEFAULT;
    }
    let mut lower = [0u8; 8];
    for (d, s) in lower.iter_mut().zip(ext) {
        *d = s.to_ascii_lowercase();
    }
    let ext = &lower[..ext.len()];
    TABLE
        .iter()
        .find(|(e, _)| e.as_bytes() == ext)
        .map_or(DEFAULT, |&(_, t)| t)
}

const DEFAULT: &str = "application/octet-stream";

const TABLE: &[(&str, &str)] = &[
    ("html", "text/html; charset=utf-8"),
    ("htm", "text/html; charset=utf-8"),
    ("css", "text/css; charset=utf-8"),
    ("js", "text/javascript; charset=utf-8"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("json", "application/json"),
    ("map", "application/json"),
    ("txt", "text/plain; charset=utf-8"),
    ("md", "text/markdown; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("xml", "application/xml"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("svg", "image/svg+xml"),
    ("ico", "image/x-icon"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("bmp", "image/bmp"),
    ("wasm", "application/wasm"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mp3", "audio/mpeg"),
    ("ogg", "audio/ogg"),
    ("wav", "audio/wav"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("ttf", "font/ttf"),
    ("otf", "font/otf"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_extension() {
        assert_eq!(content_type(b"a/index.HTML"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"x.woff2"), "font/woff2");
        assert_eq!(content_type(b"x.tar.gz"), "application/gzip");
        assert_eq!(content_type(b"noext"), DEFAULT);
        assert_eq!(content_type(b"dir.d/noext"), DEFAULT);
        assert_eq!(content_type(b"x."), DEFAULT);
        assert_eq!(content_type(b"x.verylongextension"), DEFAULT);
    }
}
