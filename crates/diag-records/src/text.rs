//! Bounding text: the one module that cuts, flattens and prefixes text that came from outside
//! (a model, a tool, a server, a file) before it enters a message, a header or a report.
//! Every cut is counted in characters (never splitting one) and marked with `…`, except
//! [`prefix_at_boundary`], which counts bytes for byte budgets.

/// `s` cut to at most `max` characters, with `…` appended when something was cut.
pub fn bounded(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// `s` in at most `max` characters, the `…` that marks a cut included.
pub fn bounded_within(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A one-line field safe to print: control characters become spaces, long text is cut to
/// `max` characters and marked with `…`.
pub fn one_line(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

/// Control characters replaced by spaces.
pub fn controls_to_spaces(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Every run of whitespace as one space, none at either end.
pub fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The longest prefix of `s` that is at most `max_bytes` long and ends on a char boundary.
pub fn prefix_at_boundary(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_cuts_characters_and_marks_the_cut() {
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("abcd", 3), "abc…");
        assert_eq!(bounded("éééé", 2), "éé…");
        assert_eq!(bounded("", 0), "");
        assert_eq!(bounded("a", usize::MAX), "a");
    }

    #[test]
    fn bounded_within_counts_the_mark() {
        assert_eq!(bounded_within("abc", 3), "abc");
        assert_eq!(bounded_within("abcd", 3), "ab…");
        assert_eq!(bounded_within("abcd", 0), "…");
    }

    #[test]
    fn one_line_flattens_controls_and_cuts() {
        assert_eq!(one_line("a\nb\tc", 10), "a b c");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }

    #[test]
    fn whitespace_and_controls() {
        assert_eq!(collapse_whitespace("  a \n\t b  "), "a b");
        assert_eq!(controls_to_spaces("a\u{7}b"), "a b");
    }

    #[test]
    fn prefixes_end_on_a_char_boundary() {
        assert_eq!(prefix_at_boundary("abc", 5), "abc");
        assert_eq!(prefix_at_boundary("aé", 2), "a");
        assert_eq!(prefix_at_boundary("aé", 3), "aé");
    }
}
