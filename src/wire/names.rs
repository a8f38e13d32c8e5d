//! Qualified table names in the stream (docs/FORMAT.md, "Table names").
//!
//! A source whose tables live in schemas (PostgreSQL) names a table
//! `schema.table`. A part that holds a `.` or a `"`, or is empty, is written
//! between double quotes with each `"` doubled, as SQL does:
//! `"app.v2".orders`, `x."y.z"`, `"a""b".c`. Names without such
//! characters are written exactly as before, so existing streams keep
//! their meaning; the quoted spelling makes every (schema, table) pair a
//! distinct name. Readers that predate the rule see the quoted name as an
//! opaque string: still one name per table, never two tables under one.

/// The stream's name of `schema`.`table`.
pub fn join(schema: &str, table: &str) -> String {
    let mut s = String::with_capacity(schema.len() + table.len() + 1);
    push_part(&mut s, schema);
    s.push('.');
    push_part(&mut s, table);
    s
}

fn needs_quotes(part: &str) -> bool {
    part.is_empty() || part.contains(['.', '"'])
}

fn push_part(out: &mut String, part: &str) {
    if needs_quotes(part) {
        out.push('"');
        for c in part.chars() {
            if c == '"' {
                out.push('"');
            }
            out.push(c);
        }
        out.push('"');
    } else {
        out.push_str(part);
    }
}

/// Split a stream name into (schema, table). A name without a schema part
/// (no unquoted `.`) has `None` for its schema; a name that is not in the
/// spelling [`join`] writes (a quote not closed, text after a closing quote,
/// a third part) is an error naming the rule.
pub fn split(name: &str) -> Result<(Option<String>, String), String> {
    let (first, rest) = part(name)?;
    match rest {
        None => Ok((None, first)),
        Some(rest) => {
            let (second, more) = part(rest)?;
            if more.is_some() {
                return Err(format!(
                    "table name {name:?} has more than two dot-separated parts (quote a part that holds a dot: \"a.b\".c)"
                ));
            }
            Ok((Some(first), second))
        }
    }
}

/// One part and what follows its separating dot.
fn part(s: &str) -> Result<(String, Option<&str>), String> {
    if let Some(body) = s.strip_prefix('"') {
        let mut out = String::new();
        let mut rest = body;
        loop {
            let Some(i) = rest.find('"') else {
                return Err(format!("table name {s:?} opens a quote it does not close"));
            };
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            match after.strip_prefix('"') {
                Some(more) => {
                    out.push('"');
                    rest = more;
                }
                None if after.is_empty() => return Ok((out, None)),
                None => match after.strip_prefix('.') {
                    Some(next) => return Ok((out, Some(next))),
                    None => {
                        return Err(format!(
                            "table name {s:?} has text after a closing quote (a part is quoted whole or not at all)"
                        ))
                    }
                },
            }
        }
    } else {
        match s.find(['.', '"']) {
            None => Ok((s.to_string(), None)),
            Some(i) if s.as_bytes()[i] == b'.' => Ok((s[..i].to_string(), Some(&s[i + 1..]))),
            Some(_) => Err(format!(
                "table name {s:?} has a quote inside an unquoted part"
            )),
        }
    }
}

/// Whether `name` is spelled as [`join`] would spell its parts (so that one
/// table has one name).
pub fn is_canonical(name: &str) -> bool {
    match split(name) {
        Ok((Some(s), t)) => join(&s, &t) == name,
        Ok((None, t)) => {
            let mut one = String::new();
            push_part(&mut one, &t);
            one == name
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_unchanged() {
        assert_eq!(join("public", "orders"), "public.orders");
        assert_eq!(join("s_", "b"), "s_.b");
        assert_eq!(
            split("public.orders").unwrap(),
            (Some("public".into()), "orders".into())
        );
        assert_eq!(split("orders").unwrap(), (None, "orders".into()));
        assert_eq!(split("\"a.b\"").unwrap(), (None, "a.b".into()));
    }

    #[test]
    fn dotted_parts_are_quoted_and_distinct() {
        let a = join("x.y", "z");
        let b = join("x", "y.z");
        assert_eq!(a, "\"x.y\".z");
        assert_eq!(b, "x.\"y.z\"");
        assert_ne!(a, b);
        assert_eq!(split(&a).unwrap(), (Some("x.y".into()), "z".into()));
        assert_eq!(split(&b).unwrap(), (Some("x".into()), "y.z".into()));
        assert_eq!(join("app.v2", "orders"), "\"app.v2\".orders");
        assert_eq!(join("a\"b", "c"), "\"a\"\"b\".c");
        assert_eq!(
            split("\"a\"\"b\".c").unwrap(),
            (Some("a\"b".into()), "c".into())
        );
        assert_eq!(join("", "t"), "\"\".t");
        assert_eq!(split("\"\".t").unwrap(), (Some("".into()), "t".into()));
    }

    #[test]
    fn bad_spellings_are_refused() {
        for bad in ["\"x.y", "\"x\"y.z", "a.b.c", "a\"b.c", "\"a\".b.c", "x.\"y"] {
            assert!(split(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn round_trip_over_awkward_parts() {
        let parts = [
            "", ".", "\"", "..", "a.b", "\"\"", "é.ü", "_", "x\"", "\".\"", "plain",
        ];
        for s in parts {
            for t in parts {
                let n = join(s, t);
                assert_eq!(
                    split(&n).unwrap(),
                    (Some(s.to_string()), t.to_string()),
                    "{n}"
                );
                assert!(is_canonical(&n), "{n}");
                for s2 in parts {
                    for t2 in parts {
                        if (s, t) != (s2, t2) {
                            assert_ne!(n, join(s2, t2));
                        }
                    }
                }
            }
        }
    }
}
