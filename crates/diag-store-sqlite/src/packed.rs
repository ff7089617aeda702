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
//!
//! A response is compressed with its exchange's request text (rebuilt and checked against
//! its sha256 before the response is read) as a zstd raw-content dictionary: a response
//! quotes the tool outputs and messages its request carried, and on the checkout incident
//! that takes the compressed responses from 4.6 KB to 2.7 KB per run. The self-evaluation
//! is compressed against the run's answer, whose facts it repeats (2.2 KB to 1.9 KB).

/// Texts shorter than this are stored as they are: a zstd frame costs a dozen bytes, and
/// short texts rarely repeat enough to win them back.
pub(crate) const MIN_PACKED: usize = 256;

/// Measured on the checkout incident's texts: level 6 stores 7 % less than zstd's default
/// (3) for little more CPU; level 19 saves 2 % more for several times the CPU.
const LEVEL: i32 = 6;

/// A text as it goes into its row: the text itself, or its zstd frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Packed {
    Plain(String),
    Zstd(Vec<u8>),
}

impl Packed {
    /// Compresses `text` when that pays (see the module documentation).
    pub(crate) fn of(text: String) -> Packed {
        Packed::with_dictionary(text, &[])
    }

    /// Compresses `text` with `dictionary` as zstd raw content it may refer back into: the
    /// same bytes must be given to [`unpack_with`]. A model response is compressed against
    /// its request, whose tool outputs and earlier messages it quotes.
    pub(crate) fn with_dictionary(text: String, dictionary: &[u8]) -> Packed {
        if text.len() < MIN_PACKED {
            return Packed::Plain(text);
        }
        let frame = zstd::bulk::Compressor::with_dictionary(LEVEL, dictionary)
            .and_then(|mut c| c.compress(text.as_bytes()));
        match frame {
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
    unpack_with(text, zstd, &[])
}

/// [`unpack`] of a text compressed with a dictionary ([`Packed::with_dictionary`]).
pub(crate) fn unpack_with(
    text: Option<String>,
    zstd: Option<Vec<u8>>,
    dictionary: &[u8],
) -> Result<Option<String>, String> {
    use std::io::Read;
    let Some(frame) = zstd else {
        return Ok(text);
    };
    let mut bytes = Vec::new();
    zstd::stream::read::Decoder::with_dictionary(frame.as_slice(), dictionary)
        .and_then(|mut d| d.read_to_end(&mut bytes))
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
    fn a_text_compressed_against_a_dictionary_needs_that_dictionary() {
        let quote = "HikariPool-1 - Connection is not available, request timed out after 30000ms";
        let request = format!(
            "{{\"messages\":[{}]}}",
            format!("{{\"tool\":\"{quote}\"}},").repeat(8)
        );
        let response = format!("the pool is exhausted: {quote}; it started at 14:02. ").repeat(4);
        let alone = Packed::of(response.clone());
        let against = Packed::with_dictionary(response.clone(), request.as_bytes());
        let frame = against.zstd().expect("compressed").to_vec();
        assert!(frame.len() < alone.zstd().expect("compressed").len());
        assert_eq!(
            unpack_with(Some(String::new()), Some(frame.clone()), request.as_bytes()).unwrap(),
            Some(response.clone())
        );
        // Without it, or with another one, the frame does not give the text back.
        assert_ne!(
            unpack(None, Some(frame.clone())).ok(),
            Some(Some(response.clone()))
        );
        assert_ne!(
            unpack_with(None, Some(frame), b"another dictionary").ok(),
            Some(Some(response))
        );
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
