//! Safe rendering of an answer for a terminal (openspec/specs/verified-evidence/spec.md): model-written text must not be
//! able to move the cursor, rewrite the title, hide text, open hyperlinks or reorder what
//! the operator reads, and it must stay bounded in size.

/// Upper bound of a rendered answer in bytes, truncation marker included.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// Appended, after a blank line, when the answer was cut.
pub const TRUNCATION_MARKER: &str = "[answer truncated]";

const MARKER_SEPARATOR: &str = "\n\n";

/// Renders `markdown` for display:
///
/// - ESC sequences are removed whole: CSI (`ESC [` … final byte), OSC (`ESC ]` … BEL or ST),
///   DCS/SOS/PM/APC strings (`ESC P`, `ESC X`, `ESC ^`, `ESC _` … ST), and two-byte or
///   intermediate escapes (`ESC c`, `ESC ( B`, …); their 8-bit C1 forms likewise. A string
///   sequence left unterminated swallows the rest of the text, as it would on a terminal.
/// - Other C0 controls (except `\n` and `\t`), DEL and C1 controls are dropped.
/// - `\r\n` becomes `\n`, and a lone `\r` becomes `\n` so it cannot overwrite a line.
/// - Bidi embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069) are dropped.
/// - The result is at most [`MAX_ANSWER_BYTES`], cut at a char boundary and ending in
///   [`TRUNCATION_MARKER`] when it was longer.
///
/// One pass, and it stops reading once the bound is exceeded, so huge input costs little.
pub fn render_answer(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len().min(MAX_ANSWER_BYTES + 4));
    let mut chars = markdown.chars().peekable();
    while let Some(c) = chars.next() {
        if out.len() > MAX_ANSWER_BYTES {
            break;
        }
        match c {
            '\n' | '\t' => out.push(c),
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push('\n');
            }
            ESC => skip_escape(&mut chars),
            '\u{9b}' => skip_csi(&mut chars),
            '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if c.is_control() || is_bidi_control(c) => {}
            c => out.push(c),
        }
    }
    bound(out)
}

const ESC: char = '\u{1b}';
const BEL: char = '\u{7}';
/// CAN and SUB abort a sequence in progress on VT-style terminals.
const CAN: char = '\u{18}';
const SUB: char = '\u{1a}';
/// The 8-bit String Terminator.
const ST: char = '\u{9c}';

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// After an ESC: skips the rest of the sequence it introduces.
fn skip_escape(chars: &mut Chars) {
    match chars.peek().copied() {
        Some('[') => {
            chars.next();
            skip_csi(chars);
        }
        Some(']' | 'P' | 'X' | '^' | '_') => {
            chars.next();
            skip_string(chars);
        }
        Some(c) if ('\u{20}'..='\u{2f}').contains(&c) => {
            while chars
                .next_if(|c| ('\u{20}'..='\u{2f}').contains(c))
                .is_some()
            {}
            let _final_byte = chars.next_if(|c| ('\u{30}'..='\u{7e}').contains(c));
        }
        Some(c) if ('\u{30}'..='\u{7e}').contains(&c) => {
            chars.next();
        }
        // A lone ESC (end of text, or before a char that starts no sequence) is dropped.
        _ => {}
    }
}

/// After a CSI introducer: parameter and intermediate bytes, then one final byte. A
/// malformed sequence ends at the first byte that cannot continue it; that byte is kept.
fn skip_csi(chars: &mut Chars) {
    while chars
        .next_if(|c| ('\u{20}'..='\u{3f}').contains(c))
        .is_some()
    {}
    let _final_byte =
        chars.next_if(|c| ('\u{40}'..='\u{7e}').contains(c) || *c == CAN || *c == SUB);
}

/// After an OSC/DCS/SOS/PM/APC introducer: everything up to BEL, ST (8-bit, or `ESC \`,
/// which the main loop removes as a two-byte escape), CAN or SUB.
fn skip_string(chars: &mut Chars) {
    while let Some(&c) = chars.peek() {
        match c {
            BEL | ST | CAN | SUB => {
                chars.next();
                return;
            }
            ESC => return,
            _ => {
                chars.next();
            }
        }
    }
}

fn bound(mut out: String) -> String {
    if out.len() <= MAX_ANSWER_BYTES {
        return out;
    }
    let mut cut = MAX_ANSWER_BYTES - TRUNCATION_MARKER.len() - MARKER_SEPARATOR.len();
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    out.truncate(cut);
    out.push_str(MARKER_SEPARATOR);
    out.push_str(TRUNCATION_MARKER);
    out
}
