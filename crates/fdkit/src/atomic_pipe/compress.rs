//! zstd compression of whole messages and bursts, as Atomic::Pipe does it.
//!
//! A compressed message is one zstd frame (content size in the header, no checksum), chunked
//! like any other message; a compressed burst is one frame written as one burst. Nothing on the
//! wire says a stream is compressed: both ends are configured alike. Raw dictionaries (any
//! bytes, no zstd dictionary header) are supported, as with Perl's `Compress::Zstd`.

use std::io::Read;

/// The zstd level Atomic::Pipe uses by default.
pub const DEFAULT_LEVEL: i32 = 3;

/// The largest message a reader decompresses (1 GiB): a frame claiming more is refused before
/// any memory is reserved, so a hostile writer cannot make the reader allocate without bound.
pub const MAX_DECOMPRESSED: u64 = 1 << 30;

/// How both ends compress: the level (writer) and an optional dictionary (both).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compression {
    /// zstd level (1..=22; negative levels are the fast modes).
    pub level: i32,
    /// Raw dictionary bytes, or a trained dictionary (zstd's `--train` output).
    pub dictionary: Option<Vec<u8>>,
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            level: DEFAULT_LEVEL,
            dictionary: None,
        }
    }
}

/// A writer's compression context, reused for every message (`ZSTD_CCtx`).
pub struct Compressor {
    inner: zstd::bulk::Compressor<'static>,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Compressor")
    }
}

impl Compressor {
    /// A context for `config`; fails on a level zstd rejects or a malformed trained dictionary.
    pub fn new(config: &Compression) -> std::io::Result<Self> {
        let dict = config.dictionary.as_deref().unwrap_or(&[]);
        let inner = zstd::bulk::Compressor::with_dictionary(config.level, dict)?;
        Ok(Compressor { inner })
    }

    /// Compresses `data` into one frame appended to `out` (cleared first).
    pub fn compress_into(&mut self, data: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(data.len()));
        self.inner.compress_to_buffer(data, out)?;
        Ok(())
    }
}

/// A reader's decompression context, reused for every message (`ZSTD_DCtx`).
pub struct Decompressor {
    inner: zstd::bulk::Decompressor<'static>,
    dictionary: Option<Vec<u8>>,
}

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Decompressor")
    }
}

/// Why a frame did not decompress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecompressError(pub String);

impl std::fmt::Display for DecompressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecompressError {}

impl Decompressor {
    /// A context for `config` (only its dictionary matters here).
    pub fn new(config: &Compression) -> std::io::Result<Self> {
        let dict = config.dictionary.as_deref().unwrap_or(&[]);
        let inner = zstd::bulk::Decompressor::with_dictionary(dict)?;
        Ok(Decompressor {
            inner,
            dictionary: config.dictionary.clone(),
        })
    }

    /// Decompresses one whole frame. The frame's declared content size sizes the output; a
    /// frame without one (written by a streaming compressor) is decoded by streaming, still
    /// capped at [`MAX_DECOMPRESSED`].
    pub fn decompress(&mut self, frame: &[u8]) -> Result<Vec<u8>, DecompressError> {
        match zstd::zstd_safe::get_frame_content_size(frame) {
            Ok(Some(n)) if n > MAX_DECOMPRESSED => Err(DecompressError(format!(
                "zstd frame declares {n} bytes, above the {MAX_DECOMPRESSED}-byte limit"
            ))),
            Ok(Some(n)) => self
                .inner
                .decompress(frame, n as usize)
                .map_err(|e| DecompressError(format!("bad zstd frame: {e}"))),
            Ok(None) => self.decompress_streaming(frame),
            Err(_) => Err(DecompressError("not a zstd frame".into())),
        }
    }

    fn decompress_streaming(&self, frame: &[u8]) -> Result<Vec<u8>, DecompressError> {
        let dict = self.dictionary.as_deref().unwrap_or(&[]);
        let decoder = zstd::stream::read::Decoder::with_dictionary(frame, dict)
            .map_err(|e| DecompressError(format!("bad zstd frame: {e}")))?;
        let mut out = Vec::new();
        decoder
            .take(MAX_DECOMPRESSED + 1)
            .read_to_end(&mut out)
            .map_err(|e| DecompressError(format!("bad zstd frame: {e}")))?;
        if out.len() as u64 > MAX_DECOMPRESSED {
            return Err(DecompressError(format!(
                "zstd frame holds more than the {MAX_DECOMPRESSED}-byte limit"
            )));
        }
        Ok(out)
    }
}

impl From<DecompressError> for std::io::Error {
    /// [`std::io::ErrorKind::InvalidData`], carrying the [`DecompressError`].
    fn from(e: DecompressError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}
