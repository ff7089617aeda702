//! RFC 6901 JSON Pointers: the syntax check the Executor parser applies to `raw_path`, and the
//! exact resolver the Gatekeeper uses to find the string a binding quotes.
//!
//! serde_json's `Value::pointer` is deliberately not used: it accepts invalid escapes (`~2`, a
//! lone `~`) as literal text, so a binding the RFC calls malformed could still resolve. A
//! binding is evidence; it must point exactly where the RFC says or nowhere.

use serde_json::Value;

/// Why a pointer is malformed or does not resolve. Messages name positions, never the
/// pointer's text, so they are safe to record whatever the model wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// A non-empty pointer must start with `/`.
    #[error("a JSON Pointer must be empty or start with '/'")]
    MissingLeadingSlash,
    /// `~` must be followed by `0` or `1`.
    #[error("invalid escape in reference token {token}: '~' must be followed by '0' or '1'")]
    InvalidEscape { token: usize },
    /// The object at this depth has no member with the token's name.
    #[error("reference token {token} names no member of the object")]
    NoSuchMember { token: usize },
    /// The token is not a valid array index: decimal digits, no leading zero, no sign.
    #[error("reference token {token} is not an array index")]
    InvalidIndex { token: usize },
    /// `-` names the element after the last one, which never exists.
    #[error("reference token {token} is '-', which names no existing array element")]
    PastTheEnd { token: usize },
    /// The index is well formed but the array is shorter.
    #[error("reference token {token} is past the end of the array")]
    IndexOutOfBounds { token: usize },
    /// The pointer goes on below a string, number, boolean or null.
    #[error("reference token {token} descends into a scalar value")]
    NotAContainer { token: usize },
}

/// Splits and unescapes a pointer into its reference tokens; `""` has none.
pub fn tokens(pointer: &str) -> Result<Vec<String>, PointerError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer
        .strip_prefix('/')
        .ok_or(PointerError::MissingLeadingSlash)?;
    rest.split('/')
        .enumerate()
        .map(|(i, raw)| unescape(raw, i))
        .collect()
}

/// Whether `pointer` is syntactically valid, without resolving it against anything.
pub fn validate(pointer: &str) -> Result<(), PointerError> {
    tokens(pointer).map(|_| ())
}

/// Resolves `pointer` in `doc` exactly as RFC 6901 §4 describes.
pub fn resolve<'a>(doc: &'a Value, pointer: &str) -> Result<&'a Value, PointerError> {
    let mut target = doc;
    for (i, token) in tokens(pointer)?.iter().enumerate() {
        target = match target {
            Value::Object(map) => map
                .get(token.as_str())
                .ok_or(PointerError::NoSuchMember { token: i })?,
            Value::Array(items) => items.get(array_index(token, i)?).ok_or(
                // A syntactically valid index too large for usize is simply out of bounds.
                PointerError::IndexOutOfBounds { token: i },
            )?,
            _ => return Err(PointerError::NotAContainer { token: i }),
        };
    }
    Ok(target)
}

/// Escapes one member name for use as a reference token (`~` first, so `/` → `~1` stays).
pub fn escape_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Left-to-right unescaping, so `~01` becomes `~1` and never `/` (RFC 6901 §4).
fn unescape(raw: &str, token: usize) -> Result<String, PointerError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return Err(PointerError::InvalidEscape { token }),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// `array-index = %x30 / ( %x31-39 *(%x30-39) )`; `-` is recognised so it can be reported.
fn array_index(token: &str, i: usize) -> Result<usize, PointerError> {
    if token == "-" {
        return Err(PointerError::PastTheEnd { token: i });
    }
    let bytes = token.as_bytes();
    let well_formed = !bytes.is_empty()
        && bytes.iter().all(u8::is_ascii_digit)
        && (bytes[0] != b'0' || bytes.len() == 1);
    if !well_formed {
        return Err(PointerError::InvalidIndex { token: i });
    }
    // Digits only, so the sole possible parse failure is overflow: no such element.
    token
        .parse::<usize>()
        .map_err(|_| PointerError::IndexOutOfBounds { token: i })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The example document of RFC 6901 §5.
    fn rfc_doc() -> Value {
        json!({
            "foo": ["bar", "baz"],
            "": 0,
            "a/b": 1,
            "c%d": 2,
            "e^f": 3,
            "g|h": 4,
            "i\\j": 5,
            "k\"l": 6,
            " ": 7,
            "m~n": 8
        })
    }

    #[test]
    fn rfc6901_section5_examples_resolve() {
        let doc = rfc_doc();
        let cases: &[(&str, Value)] = &[
            ("", doc.clone()),
            ("/foo", json!(["bar", "baz"])),
            ("/foo/0", json!("bar")),
            ("/", json!(0)),
            ("/a~1b", json!(1)),
            ("/c%d", json!(2)),
            ("/e^f", json!(3)),
            ("/g|h", json!(4)),
            ("/i\\j", json!(5)),
            ("/k\"l", json!(6)),
            ("/ ", json!(7)),
            ("/m~0n", json!(8)),
        ];
        for (pointer, want) in cases {
            assert_eq!(resolve(&doc, pointer), Ok(want), "pointer {pointer:?}");
            // For every valid pointer here serde_json agrees; it differs only on malformed ones.
            assert_eq!(
                doc.pointer(pointer),
                Some(want),
                "serde_json on {pointer:?}"
            );
        }
    }

    #[test]
    fn unescaping_is_left_to_right() {
        let doc = json!({"~1": "tilde-one", "/": "slash", "~": "tilde", "a~/b": "mixed"});
        assert_eq!(resolve(&doc, "/~01"), Ok(&json!("tilde-one")));
        assert_eq!(resolve(&doc, "/~1"), Ok(&json!("slash")));
        assert_eq!(resolve(&doc, "/~0"), Ok(&json!("tilde")));
        assert_eq!(resolve(&doc, "/a~0~1b"), Ok(&json!("mixed")));
        assert_eq!(tokens("/~01/~10").unwrap(), vec!["~1", "/0"]);
    }

    #[test]
    fn invalid_escapes_are_errors_where_serde_json_is_lenient() {
        let doc = json!({"~2": 1, "~": 2, "a~": 3});
        for (pointer, token) in [("/~2", 0), ("/~", 0), ("/a~", 0), ("/x/~a", 1)] {
            assert_eq!(
                resolve(&doc, pointer),
                Err(PointerError::InvalidEscape { token }),
                "{pointer:?}"
            );
            assert!(validate(pointer).is_err());
        }
        // The leniency that rules out serde_json's resolver for bindings.
        assert_eq!(doc.pointer("/~2"), Some(&json!(1)));
        assert_eq!(doc.pointer("/~"), Some(&json!(2)));
    }

    #[test]
    fn a_pointer_must_be_empty_or_start_with_a_slash() {
        let doc = rfc_doc();
        for pointer in ["foo", "foo/0", " /foo", "#/foo"] {
            assert_eq!(
                resolve(&doc, pointer),
                Err(PointerError::MissingLeadingSlash)
            );
        }
        assert_eq!(validate(""), Ok(()));
        assert_eq!(validate("/"), Ok(()));
        assert_eq!(validate("//"), Ok(()));
    }

    #[test]
    fn array_indices_are_strict_decimal() {
        let doc = json!({"a": [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]});
        assert_eq!(resolve(&doc, "/a/0"), Ok(&json!(10)));
        assert_eq!(resolve(&doc, "/a/10"), Ok(&json!(20)));
        for bad in [
            "/a/01", "/a/00", "/a/+1", "/a/-1", "/a/ 1", "/a/1 ", "/a/1e0", "/a/",
        ] {
            assert_eq!(
                resolve(&doc, bad),
                Err(PointerError::InvalidIndex { token: 1 }),
                "{bad:?}"
            );
        }
        assert_eq!(
            resolve(&doc, "/a/-"),
            Err(PointerError::PastTheEnd { token: 1 })
        );
        assert_eq!(
            resolve(&doc, "/a/11"),
            Err(PointerError::IndexOutOfBounds { token: 1 })
        );
        assert_eq!(
            resolve(&doc, "/a/99999999999999999999999999"),
            Err(PointerError::IndexOutOfBounds { token: 1 })
        );
    }

    #[test]
    fn index_like_tokens_are_plain_names_on_objects() {
        let doc = json!({"01": "zero-one", "-": "dash", "0": "zero"});
        assert_eq!(resolve(&doc, "/01"), Ok(&json!("zero-one")));
        assert_eq!(resolve(&doc, "/-"), Ok(&json!("dash")));
        assert_eq!(resolve(&doc, "/0"), Ok(&json!("zero")));
    }

    #[test]
    fn missing_members_and_scalars_do_not_resolve() {
        let doc = json!({"a": {"b": "text"}, "n": null});
        assert_eq!(
            resolve(&doc, "/a/c"),
            Err(PointerError::NoSuchMember { token: 1 })
        );
        assert_eq!(
            resolve(&doc, "/a/b/0"),
            Err(PointerError::NotAContainer { token: 2 })
        );
        assert_eq!(
            resolve(&doc, "/n/x"),
            Err(PointerError::NotAContainer { token: 1 })
        );
        assert_eq!(resolve(&doc, "/n"), Ok(&Value::Null));
        assert_eq!(
            resolve(&json!("root"), "/x"),
            Err(PointerError::NotAContainer { token: 0 })
        );
    }

    #[test]
    fn escape_token_round_trips_through_resolve() {
        let names = ["plain", "a/b", "m~n", "~1", "~0/~1", ""];
        let mut doc = serde_json::Map::new();
        for (i, name) in names.iter().enumerate() {
            doc.insert((*name).to_string(), json!(i));
        }
        let doc = Value::Object(doc);
        for (i, name) in names.iter().enumerate() {
            let pointer = format!("/{}", escape_token(name));
            assert_eq!(resolve(&doc, &pointer), Ok(&json!(i)), "{name:?}");
        }
    }

    #[test]
    fn error_messages_do_not_echo_the_pointer() {
        let secret = "/AAAAAAAAAAAAAAAA~9";
        let msg = resolve(&json!({}), secret).unwrap_err().to_string();
        assert!(!msg.contains("AAAA"), "{msg}");
    }
}
