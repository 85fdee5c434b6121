//! A reader for the INI dialect of Go's gcfg, keeping line numbers.
//!
//! gcfg is what upstream reads cloud.conf with: section and key names are case-insensitive,
//! sections may have a quoted subsection (`[LoadBalancerClass "internal"]`), keys may repeat,
//! values may be quoted (`"…"` with `\"`, `\\`, `\n`, `\t`), `;` and `#` start comments outside
//! quotes, and a key without `=` means `true`.

/// One `key = value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The key, lower-cased.
    pub(crate) key: String,
    /// The key as written.
    pub(crate) written_key: String,
    /// The value, unquoted.
    pub(crate) value: String,
    /// The line (1-based).
    pub(crate) line: usize,
}

/// One `[Section "subsection"]` and its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Section {
    /// The section name, lower-cased.
    pub(crate) name: String,
    /// The section name as written.
    pub(crate) written_name: String,
    /// The subsection, as written (subsections are case-sensitive in gcfg).
    pub(crate) subsection: Option<String>,
    /// The header's line.
    pub(crate) line: usize,
    /// The entries in file order.
    pub(crate) entries: Vec<Entry>,
}

/// Splits `text` into sections; the error is `(line, reason)`.
pub(crate) fn parse(text: &str) -> Result<Vec<Section>, (usize, String)> {
    let mut sections: Vec<Section> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with(';') || trimmed.starts_with('#') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            let header = strip_comment(rest);
            let Some(inner) = header.trim_end().strip_suffix(']') else {
                return Err((line, format!("section header {trimmed:?} has no closing ]")));
            };
            let (name, subsection) = match inner.trim().split_once(char::is_whitespace) {
                None => (inner.trim().to_owned(), None),
                Some((name, sub)) => {
                    let sub = sub.trim();
                    let Some(quoted) = sub.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else {
                        return Err((
                            line,
                            format!("subsection in {trimmed:?} must be quoted, like [{name} \"name\"]"),
                        ));
                    };
                    (name.to_owned(), Some(unescape(quoted, line)?))
                }
            };
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            {
                return Err((line, format!("invalid section name in {trimmed:?}")));
            }
            sections.push(Section {
                name: name.to_ascii_lowercase(),
                written_name: name,
                subsection,
                line,
                entries: Vec::new(),
            });
            continue;
        }
        let Some(section) = sections.last_mut() else {
            return Err((line, format!("{trimmed:?} comes before any [section]")));
        };
        let (key, value) = match trimmed.split_once('=') {
            Some((k, v)) => (k.trim(), value_of(v, line)?),
            None => (strip_comment(trimmed).trim(), "true".to_owned()),
        };
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err((line, format!("invalid key {key:?}")));
        }
        section.entries.push(Entry {
            key: key.to_ascii_lowercase(),
            written_key: key.to_owned(),
            value,
            line,
        });
    }
    Ok(sections)
}

/// Drops a `;`/`#` comment that is outside quotes.
fn strip_comment(s: &str) -> &str {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ';' | '#' if !quoted => return &s[..i],
            _ => {}
        }
    }
    s
}

/// A value: comments dropped, quoted parts unquoted and unescaped.
fn value_of(raw: &str, line: usize) -> Result<String, (usize, String)> {
    let v = strip_comment(raw).trim();
    if !v.contains('"') {
        return Ok(v.to_owned());
    }
    // gcfg allows quoted and unquoted parts side by side: `a"b c"d` is `ab cd`.
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(c @ ('"' | '\\')) => out.push(c),
                other => return Err((line, format!("invalid escape \\{}", other.unwrap_or(' ')))),
            },
            c => out.push(c),
        }
    }
    if quoted {
        return Err((line, "unterminated quoted value".to_owned()));
    }
    Ok(out)
}

fn unescape(s: &str, line: usize) -> Result<String, (usize, String)> {
    value_of(&format!("\"{s}\""), line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_keys_quotes_comments_and_lines() {
        let text = "; comment\n[Global]\nauth-url = https://k:5000/v3 ; trailing\n\
                    password = \"p;a#s\\\"s\"\n\n[LoadBalancerClass \"internal net\"]\nSubnet-ID=abc\nflag\n";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "global");
        assert_eq!(s[0].entries[0].value, "https://k:5000/v3");
        assert_eq!(s[0].entries[0].line, 3);
        assert_eq!(s[0].entries[1].value, "p;a#s\"s");
        assert_eq!(s[1].subsection.as_deref(), Some("internal net"));
        assert_eq!(s[1].entries[0].key, "subnet-id");
        assert_eq!(s[1].entries[0].line, 7);
        assert_eq!(s[1].entries[1].value, "true");
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(parse("a = b\n").unwrap_err().0, 1);
        assert_eq!(parse("[Global]\n\n[Oops\n").unwrap_err().0, 3);
        assert!(
            parse("[Global]\nk = \"open\n")
                .unwrap_err()
                .1
                .contains("unterminated")
        );
        assert!(
            parse("[LoadBalancerClass x]\n")
                .unwrap_err()
                .1
                .contains("must be quoted")
        );
    }
}
