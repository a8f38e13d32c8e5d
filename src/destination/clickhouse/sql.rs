//! SQL and TabSeparated text: quoting and unescaping.

pub(super) fn qi(s: &str) -> String {
    format!("`{}`", s.replace('\\', "\\\\").replace('`', "\\`"))
}

/// A ClickHouse string literal.
pub(super) fn sql_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Undo TabSeparated escaping.
pub(super) fn tsv_unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('0') => out.push('\0'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The useful part of a ClickHouse error body.
pub(super) fn error_text(body: &str) -> String {
    let t = body.trim();
    let t = t.split(", e.what()").next().unwrap_or(t);
    let t = t.replace("e.displayText() = ", "");
    t.chars().take(1000).collect()
}
