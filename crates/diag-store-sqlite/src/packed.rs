//! Large per-run texts stored zstd-compressed: model responses (`model_exchange.response`),
//! tool outputs (`tool_invocation.output`), the run's self-evaluation and its answer
//! (`diagnosis_run`). They are what a run stores of its own once request parts are shared
//! (`blobs.rs`), and they are JSON or prose that compresses about threefold row by row.
//!
//! Each such column has a `…_zstd BLOB` sibling (schema version 5). A text of at least
//! [`MIN_PACKED`] bytes whose zstd frame is smaller is stored in the sibling, and the text
//! column holds `''`; any other text is stored as it is.
//! Rows written before version 5 keep their plain texts, which read as they always did.
//! A frame that does not decode to UTF-8 is a corrupt store, never handed on.

/// Texts shorter than this are stored as they are: a zstd frame costs a dozen bytes, and
/// short texts rarely repeat enough to win them back.
pub(crate) const MIN_PACKED: usize = 256;

/// zstd's default level: measured on the checkout incident's texts, level 19 saves a further
/// 4 % for several times the CPU.
const LEVEL: i32 = 3;

/// A text as it goes into its row: the text itself, or its zstd frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Packed {
    Plain(String),
    Zstd(Vec<u8>),
}

impl Packed {
    /// Compresses `text` when that pays (see the module documentation).
    pub(crate) fn of(text: String) -> Packed {
        if text.len() < MIN_PACKED {
            return Packed::Plain(text);
        }
        match zstd::bulk::compress(text.as_bytes(), LEVEL) {
            Ok(frame) if frame.len() < text.len() => Packed::Zstd(frame),
            _ => Packed::Plain(text),
        }
    }

    /// The text column's value (`""` when the text is in the zstd column).
    pub(crate) fn text(&self) -> &str {
        match self {
            Packed::Plain(t) => t,
            Packed::Zstd(_) => "",
        }
    }

    /// The zstd column's value.
    pub(crate) fn zstd(&self) -> Option<&[u8]> {
        match self {
            Packed::Plain(_) => None,
            Packed::Zstd(f) => Some(f),
        }
    }
}

/// The text of a column pair as read: the zstd frame decoded when there is one, else the
/// plain text. `Err` names what is wrong with a frame.
pub(crate) fn unpack(
    text: Option<String>,
    zstd: Option<Vec<u8>>,
) -> Result<Option<String>, String> {
    let Some(frame) = zstd else {
        return Ok(text);
    };
    let bytes = zstd::stream::decode_all(frame.as_slice())
        .map_err(|e| format!("a compressed text does not decode: {e}"))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| "a compressed text is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_compressed_and_read_back_exactly() {
        let text = format!(
            "{{\"matches\":[{}]}}",
            "{\"line\":\"ERROR checkout 502\"},".repeat(40)
        );
        let packed = Packed::of(text.clone());
        let frame = packed.zstd().expect("compressed").to_vec();
        assert!(
            frame.len() * 4 < text.len(),
            "{} of {}",
            frame.len(),
            text.len()
        );
        assert_eq!(packed.text(), "");
        assert_eq!(unpack(None, Some(frame)).unwrap(), Some(text));
    }

    #[test]
    fn short_texts_stay_plain_and_every_text_reads_back_as_written() {
        let short = "x".repeat(MIN_PACKED - 1);
        assert_eq!(Packed::of(short.clone()), Packed::Plain(short.clone()));
        // Texts of every kind and length around the threshold, as their columns hold them.
        let mut state = 0x2545_f491_u32;
        for len in [0, 1, MIN_PACKED - 1, MIN_PACKED, MIN_PACKED + 1, 400, 5000] {
            let noise: String = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    ['a', 'é', '"', '\\', '\n', '字', '{', '7'][(state % 8) as usize]
                })
                .collect();
            for text in [noise, "ab".repeat(len / 2)] {
                let p = Packed::of(text.clone());
                let (column, frame) = (p.text().to_string(), p.zstd().map(<[u8]>::to_vec));
                assert!(frame.is_none() || column.is_empty());
                assert_eq!(unpack(Some(column), frame).unwrap(), Some(text));
            }
        }
        assert_eq!(unpack(None, None).unwrap(), None);
    }

    #[test]
    fn a_damaged_frame_is_an_error_not_a_text() {
        let Packed::Zstd(mut frame) = Packed::of("{\"a\":1}".repeat(100)) else {
            panic!("compressed");
        };
        let mid = frame.len() / 2;
        frame.truncate(mid);
        assert!(unpack(None, Some(frame)).is_err());
        assert!(unpack(None, Some(b"not zstd".to_vec())).is_err());
    }
}
