//! Declared types of projection columns, and the affinity check that keeps
//! every value in its class.

use super::*;

/// Words that begin a column constraint: never part of a declared type that
/// SQLite reports, so a stream whose type holds one is not pasted as is.
const CONSTRAINT_WORDS: &[&str] = &[
    "CONSTRAINT",
    "PRIMARY",
    "KEY",
    "NOT",
    "NULL",
    "UNIQUE",
    "CHECK",
    "DEFAULT",
    "COLLATE",
    "REFERENCES",
    "GENERATED",
    "AS",
    "ON",
    "AUTOINCREMENT",
];

/// Whether a declared type is a plain SQLite type name: words, then at most
/// `(n)` or `(n, m)`, e.g. `VARCHAR(10)`, `DOUBLE PRECISION`, `DECIMAL(10,2)`.
/// Anything else (quotes, punctuation, constraint words) is never pasted into
/// SQL text.
pub(super) fn plain_type_name(decl: &str) -> bool {
    let (words, args) = match decl.split_once('(') {
        Some((w, rest)) => match rest.strip_suffix(')') {
            Some(a) => (w, Some(a)),
            None => return false,
        },
        None => (decl, None),
    };
    let word_ok = |w: &str| {
        let mut b = w.bytes();
        b.next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
            && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
            && !CONSTRAINT_WORDS.iter().any(|k| k.eq_ignore_ascii_case(w))
    };
    let mut n = 0;
    for w in words.split_ascii_whitespace() {
        if !word_ok(w) {
            return false;
        }
        n += 1;
    }
    let number = |s: &str| {
        let s = s.trim();
        let s = s.strip_prefix(['+', '-']).unwrap_or(s);
        let (i, f) = s.split_once('.').unwrap_or((s, "0"));
        !i.is_empty()
            && !f.is_empty()
            && i.bytes().all(|c| c.is_ascii_digit())
            && f.bytes().all(|c| c.is_ascii_digit())
    };
    n > 0
        && args.is_none_or(|a| {
            let parts: Vec<&str> = a.split(',').collect();
            parts.len() <= 2 && parts.iter().all(|p| number(p))
        })
}

/// The declared type a projection column gets. Every choice keeps each value
/// in its class (docs/TOOLS.md (apply)): a SQLite source's declared type is copied when it
/// is a plain type name (its affinity is the one the source already applied,
/// and applying an affinity twice changes nothing), else the type named after
/// its affinity; `ANY` (no affinity in a STRICT table, NUMERIC elsewhere) and
/// every column of other sources get no type, which means no affinity.
pub(super) fn column_type(decl: &str, kind: crate::wire::SourceKind) -> String {
    let decl = decl.trim();
    if kind != crate::wire::SourceKind::Sqlite || decl.eq_ignore_ascii_case("ANY") {
        return String::new();
    }
    if plain_type_name(decl) {
        return decl.to_string();
    }
    match affinity(decl) {
        Affinity::Integer => "INTEGER",
        Affinity::Text => "TEXT",
        Affinity::Blob => "",
        Affinity::Real => "REAL",
        Affinity::Numeric => "NUMERIC",
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What SQLite itself stores for `v` in a column declared `decl`.
    fn stored_class(conn: &Connection, decl: &str, v: &Value) -> String {
        conn.execute_batch(&format!("DROP TABLE IF EXISTS a; CREATE TABLE a(x {decl})"))
            .unwrap();
        conn.execute("INSERT INTO a VALUES (?1)", [Bind(v)])
            .unwrap();
        conn.query_row("SELECT typeof(x) FROM a", [], |r| r.get(0))
            .unwrap()
    }

    fn class_of(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Integer(_) => "integer",
            Value::Real(_) => "real",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
            Value::Unchanged => "unchanged",
        }
    }

    const DECLS: &[&str] = &["INTEGER", "TEXT", "", "REAL", "NUMERIC", "ANY", "BOOLEAN"];

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::Integer),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Value::Real),
            (-1e6f64..1e6).prop_map(|x| Value::Real(x.round())),
            "[ \t\n\u{b}\u{c}\r+\\-.eE0-9x]{0,8}".prop_map(Value::Text),
            ".{0,6}".prop_map(Value::Text),
            proptest::collection::vec(any::<u8>(), 0..4).prop_map(Value::Blob),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// `keeps_class` agrees with SQLite on every affinity.
        #[test]
        fn keeps_class_agrees_with_sqlite(v in value(), d in 0..DECLS.len()) {
            let conn = Connection::open_in_memory().unwrap();
            let decl = DECLS[d];
            let kept = stored_class(&conn, decl, &v) == class_of(&v);
            prop_assert_eq!(keeps_class(affinity(decl), &v), kept, "{:?} in {}", v, decl);
        }
    }

    #[test]
    fn edge_values_agree_with_sqlite() {
        let conn = Connection::open_in_memory().unwrap();
        let texts = [
            "123",
            "1.50",
            " 7",
            "7 ",
            "\t7\n",
            "1e5",
            "1e",
            "1e+",
            ".5",
            "5.",
            ".",
            "-",
            "+1",
            "- 1",
            "0x10",
            "1e400",
            "--1",
            "1.2.3",
            "",
            " ",
            "\u{a0}1",
            "1\u{0}",
            "9223372036854775808",
            "inf",
            "NaN",
        ];
        let reals = [
            0.0,
            -0.0,
            2.0,
            -2.0,
            0.5,
            9.223372036854776e18,
            -9.223372036854776e18,
            9.223372036854775e18,
            1e300,
        ];
        let mut values: Vec<Value> = texts.iter().map(|t| Value::Text(t.to_string())).collect();
        values.extend(reals.iter().map(|&r| Value::Real(r)));
        values.extend([i64::MIN, -1, 0, i64::MAX].map(Value::Integer));
        for decl in DECLS {
            for v in &values {
                let kept = stored_class(&conn, decl, v) == class_of(v);
                assert_eq!(keeps_class(affinity(decl), v), kept, "{v:?} in {decl:?}");
            }
        }
    }

    #[test]
    fn declared_types_are_copied_only_when_plain() {
        let s = crate::wire::SourceKind::Sqlite;
        for plain in [
            "INTEGER",
            "VARCHAR(10)",
            "DOUBLE PRECISION",
            "DECIMAL(10, 2)",
            "decimal(-1.5,+2)",
            "UNSIGNED BIG INT",
            "DATETIME",
        ] {
            assert_eq!(column_type(plain, s), plain);
        }
        for (odd, mapped) in [
            ("INTEGER); DROP TABLE users; --", "INTEGER"),
            ("TEXT, evil INTEGER DEFAULT 666", "INTEGER"),
            ("'it''s text'", "TEXT"),
            ("INTEGER PRIMARY KEY", "INTEGER"),
            ("TEXT COLLATE NOCASE", "TEXT"),
            ("\"quoted\"", "NUMERIC"),
            ("VARCHAR(10", "TEXT"),
            ("REAL(1,2,3)", "REAL"),
            ("[odd] BLOB", ""),
            ("ANY", ""),
            ("any", ""),
        ] {
            assert_eq!(column_type(odd, s), mapped, "{odd:?}");
        }
        assert_eq!(
            column_type("INTEGER", crate::wire::SourceKind::Postgres),
            ""
        );
    }
}
