//! PostgreSQL's client side, shared by the source and the target:
//! connection settings (libpq strings, service and password files, the
//! environment), TLS, SQL sessions over multi-host strings, the types and
//! COPY's forms read as wire values, and driver errors in plain words.

pub mod conn;
mod copy;
mod pgpass;
mod pgservice;
mod session;
pub mod tls;
pub mod types;

pub use copy::CopyRows;
pub(crate) use copy::*;
pub use session::*;

use crate::error::{Cause, Error, ErrorKind, Result};
use crate::util::quote_ident;
use crate::wire::{Row, Schema, Value};
use conn::{PgConn, SessionAttrs};
use futures_util::StreamExt;
use tokio_postgres::Client;
use types::{copy_fields, from_text, Class};

/// A driver error as the cause of `what`: the server's own message for a
/// server error, the driver's text otherwise; the error itself is kept.
pub fn pg_err(what: &str) -> impl Fn(tokio_postgres::Error) -> Error + '_ {
    move |e| {
        let text = match e.as_db_error() {
            Some(d) => d.message().to_string(),
            None => {
                // The root cause in plain words, with a hint where one is known.
                let cause = crate::error::root_cause(&e);
                match cause.as_str() {
                    "connection refused" => "connection refused: is the server running on that host and accepting TCP/IP connections on that port?".to_string(),
                    c if c.contains("failed to lookup address") || c.contains("Name or service not known") => {
                        "could not translate the host name to an address".to_string()
                    }
                    _ if e.to_string() == cause => cause,
                    _ => format!("{e}: {cause}"),
                }
            }
        };
        Error::new(ErrorKind::Database, what).with_source(Cause { text, inner: e })
    }
}

/// A single-threaded runtime for one tool's sessions.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))
}

/// The server's version number (`server_version_num`, e.g. 150004).
pub async fn server_version(c: &Client) -> Result<i32> {
    let v: String = c
        .query_one("SHOW server_version_num", &[])
        .await
        .map_err(pg_err("cannot read the server's version"))?
        .get(0);
    v.trim()
        .parse()
        .map_err(|_| Error::data(format!("bad server_version_num {v:?}")))
}

/// `SELECT` of a table's columns in the key order of docs/FORMAT.md
/// (snapshots): TEXT-mapped keys compare as their text in the C collation
/// (bytewise), others natively. `from` is the quoted relation (with `ONLY`
/// where it applies), `filter` a row filter.
pub fn select_in_key_order(
    s: &Schema,
    classes: &[Class],
    from: &str,
    filter: Option<&str>,
) -> String {
    let conds: Vec<String> = filter.map(|f| format!("({f})")).into_iter().collect();
    select_in_key_order_where(s, classes, from, &conds)
}

/// [`select_in_key_order`] of the rows that meet every one of `conds`.
pub fn select_in_key_order_where(
    s: &Schema,
    classes: &[Class],
    from: &str,
    conds: &[String],
) -> String {
    let cols: Vec<String> = s.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let filter = if conds.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conds.join(" AND "))
    };
    format!(
        "SELECT {} FROM {from}{filter} ORDER BY {}",
        cols.join(", "),
        key_order(s, classes).join(", ")
    )
}

/// The expressions a table's rows are ordered by, key column by key column
/// (see [`select_in_key_order`]).
pub fn key_order(s: &Schema, classes: &[Class]) -> Vec<String> {
    s.key
        .iter()
        .map(|k| {
            let i = s
                .columns
                .iter()
                .position(|c| &c.name == k)
                .expect("checked schema");
            match classes[i] {
                // concat() uses the type's output function, so the order is
                // that of the text on the wire (a cast to text would strip a
                // char(n)'s padding).
                Class::Text => format!("concat({}) COLLATE \"C\"", quote_ident(k)),
                _ => quote_ident(k),
            }
        })
        .collect()
}
