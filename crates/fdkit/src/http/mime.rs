//! [`content_type`]: the `Content-Type` for a file name, by extension (case-insensitive).
//!
//! Text types carry `charset=utf-8`. Source and configuration files are text, so that a
//! browser shows them rather than downloading them, as `python -m http.server` serves them:
//! `.py` as `text/x-python` (what Python's `mimetypes` says on every machine), the others as
//! `text/plain`, which every browser displays. Their types from `mimetypes` depend on the
//! machine's `/etc/mime.types` (`.sh` is `application/x-sh` without it, `text/x-sh` with it)
//! or name something else (`.rs` comes out `application/rls-services+xml`, `.ts` a Qt
//! translation). `.json` stays `application/json`, whose encoding is UTF-8 by definition
//! (RFC 8259 §8.1), and a name without a known extension is `application/octet-stream`.

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
const TEXT: &str = "text/plain; charset=utf-8";

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
    ("markdown", "text/markdown; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("tsv", "text/tab-separated-values; charset=utf-8"),
    ("py", "text/x-python; charset=utf-8"),
    ("pyi", "text/x-python; charset=utf-8"),
    // Source code, scripts, configuration, logs: shown as plain text.
    ("text", TEXT),
    ("log", TEXT),
    ("rst", TEXT),
    ("sh", TEXT),
    ("bash", TEXT),
    ("zsh", TEXT),
    ("yaml", TEXT),
    ("yml", TEXT),
    ("toml", TEXT),
    ("ini", TEXT),
    ("cfg", TEXT),
    ("conf", TEXT),
    ("env", TEXT),
    ("lock", TEXT),
    ("rs", TEXT),
    ("c", TEXT),
    ("h", TEXT),
    ("cc", TEXT),
    ("cpp", TEXT),
    ("cxx", TEXT),
    ("hh", TEXT),
    ("hpp", TEXT),
    ("go", TEXT),
    ("java", TEXT),
    ("kt", TEXT),
    ("swift", TEXT),
    ("rb", TEXT),
    ("pl", TEXT),
    ("lua", TEXT),
    ("sql", TEXT),
    ("diff", TEXT),
    ("patch", TEXT),
    ("tex", TEXT),
    ("mk", TEXT),
    ("cmake", TEXT),
    ("proto", TEXT),
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

    #[test]
    fn source_and_config_files_are_text() {
        assert_eq!(content_type(b"app.py"), "text/x-python; charset=utf-8");
        for name in [
            &b"run.sh"[..],
            b"ci.yaml",
            b"ci.YML",
            b"pyproject.toml",
            b"lib.rs",
            b"main.c",
            b"fdkit.h",
            b"setup.cfg",
            b"tox.ini",
            b"server.log",
            b".env",
        ] {
            assert_eq!(
                content_type(name),
                TEXT,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
        assert_eq!(content_type(b"README.md"), "text/markdown; charset=utf-8");
        assert_eq!(content_type(b"data.json"), "application/json");
        assert_eq!(content_type(b"Makefile"), DEFAULT);
        // Every text type says its charset; no other type does.
        for (ext, t) in TABLE {
            assert_eq!(
                t.starts_with("text/"),
                t.ends_with("; charset=utf-8"),
                "{ext}"
            );
            assert!(ext.len() <= 8, "{ext} is longer than the lookup reads");
        }
    }
}
