//! One connection to the registry's store, SQLite or PostgreSQL, behind the small API the
//! registry's modules are written against: statements with `?N` parameters, rows read in
//! their columns' order through [`FromRow`] (a row struct's column list and its reading
//! written once, by [`from_row!`]), and write transactions that exclude every other writer.
//!
//! Both backends run the same SQL text, written in the dialect both accept (`ON CONFLICT`,
//! `RETURNING`, `CASE`, `substr`); PostgreSQL gets `$N` for `?N` (not inside quoted text,
//! comments or dollar-quoted text). The few statements that cannot be shared ask
//! [`Conn::is_postgres`].
//!
//! On PostgreSQL the client is `tokio-postgres`, driven by a small runtime of the
//! connection's own, so that requests can be pipelined: a write whose outcome nobody reads
//! ([`Conn::write`]) waits to be sent with the next statement whose answer is awaited, and
//! statements asked of many rows of a batch ([`Conn::execute_many`], [`Conn::query_each`],
//! [`Conn::query_batch`]) are sent together; the server runs them in order, so each sees
//! what the ones before it did, as when they are sent one at a time (SQLite runs them so).
//!
//! A write transaction behaves the same on both. SQLite's `BEGIN IMMEDIATE` takes the one
//! write lock before anything is read; on PostgreSQL the transaction first takes one
//! transaction-scoped advisory lock ([`WRITER_LOCK`]), so writers run one after another and
//! each reads what the one before it committed, exactly as on SQLite. Every decision the
//! registry's tests prove on SQLite (a claim, a fence, a takeover) therefore holds unchanged
//! on a shared server. Reads outside a transaction see the last committed state on both.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use postgres::types::{IsNull, Type};

/// The PostgreSQL advisory lock every write transaction holds: "x12gate" in ASCII.
pub const WRITER_LOCK: i64 = 0x0078_3132_6761_7465;

/// A value bound to a parameter or read from a column.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("{}", pg_message(.0))]
    Postgres(#[from] postgres::Error),
    /// PostgreSQL refused a statement; the statement's beginning names it.
    #[error("{} (in: {sql})", pg_message(.cause))]
    Statement { sql: String, cause: postgres::Error },
    #[error("the query returned no row")]
    NoRows,
    /// No connection to the server could be had or kept.
    #[error("no connection to the PostgreSQL server: {0}")]
    Disconnected(std::io::Error),
    /// A statement of the transaction failed, so PostgreSQL discarded the transaction: a
    /// COMMIT would roll it back without a word.
    #[error("the transaction was rolled back: a statement in it failed")]
    Aborted,
    /// What was to be written (an acknowledgment made as it is stored) could not be made.
    #[error("making what was to be stored: {0}")]
    Making(std::io::Error),
    #[error("column {column}: {cause}")]
    Decode {
        column: usize,
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The server's own words ("db error" alone says nothing), with its SQLSTATE.
fn pg_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        ),
        // "error performing TLS handshake": the reason is in the sources.
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

impl Error {
    /// SQLite answered "locked" where it may not have waited for the lock (its busy
    /// handler is not called everywhere), so the step is tried again. PostgreSQL waits for
    /// its locks itself, up to `lock_timeout`, and its lock errors are final.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Sqlite(e) if matches!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        ))
    }

    /// The PostgreSQL server could not be reached at all (refused, timed out, reset): an
    /// outage to wait out, unlike a wrong user, database or certificate.
    pub fn is_unreachable(&self) -> bool {
        let e = match self {
            Error::Postgres(e) => e,
            Error::Disconnected(_) => return true,
            _ => return false,
        };
        if e.as_db_error().is_some() {
            return false;
        }
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            if cause.is::<std::io::Error>() {
                return true;
            }
            source = cause.source();
        }
        false
    }

    /// A constraint of the schema refused the write (both backends).
    pub fn is_constraint(&self) -> bool {
        match self {
            Error::Sqlite(e) => {
                e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation)
            }
            Error::Postgres(e) => e.code().is_some_and(|c| c.code().starts_with("23")),
            _ => false,
        }
    }

    fn decode(column: usize, cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Error::Decode {
            column,
            cause: cause.into(),
        }
    }
}

/// `Ok(None)` for a query that found no row, as rusqlite's extension of the same name.
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoRows) => Ok(None),
            Err(Error::Sqlite(rusqlite::Error::QueryReturnedNoRows)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// What can be bound to a parameter.
pub trait ToValue {
    fn to_value(&self) -> Value;
}

/// What a column can be read as.
pub trait FromValue: Sized {
    fn from_value(v: Value) -> Result<Self, Box<dyn std::error::Error + Send + Sync>>;
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, T::to_value)
    }
}

impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
}

impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}

macro_rules! int_to_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                // Counts and sizes past i64 do not occur; saturating keeps them ordered.
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
        impl FromValue for $t {
            fn from_value(v: Value) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
                match v {
                    Value::Int(i) => Ok(<$t>::try_from(i)?),
                    other => Err(format!("{} where an integer was expected", kind(&other)).into()),
                }
            }
        }
    )*};
}

int_to_value!(i64, i32, u32, u64, usize, u16, u8);

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "NULL",
        Value::Int(_) => "an integer",
        Value::Real(_) => "a real",
        Value::Text(_) => "text",
        Value::Blob(_) => "a blob",
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: Value) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

impl FromValue for String {
    fn from_value(v: Value) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        match v {
            Value::Text(s) => Ok(s),
            other => Err(format!("{} where text was expected", kind(&other)).into()),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: Value) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        match v {
            Value::Blob(b) => Ok(b),
            Value::Text(s) => Ok(s.into_bytes()),
            other => Err(format!("{} where a blob was expected", kind(&other)).into()),
        }
    }
}

impl FromValue for bool {
    fn from_value(v: Value) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        match v {
            Value::Int(i) => Ok(i != 0),
            other => Err(format!("{} where a boolean was expected", kind(&other)).into()),
        }
    }
}

/// A statement's parameters: `params![a, b]`, `[a]` or `[]`.
pub trait Params {
    fn values(&self) -> Vec<Value>;
}

impl Params for &[&dyn ToValue] {
    fn values(&self) -> Vec<Value> {
        self.iter().map(|v| v.to_value()).collect()
    }
}

impl Params for Vec<Value> {
    fn values(&self) -> Vec<Value> {
        self.clone()
    }
}

impl Params for [&dyn ToValue; 0] {
    fn values(&self) -> Vec<Value> {
        Vec::new()
    }
}

macro_rules! array_params {
    ($($n:literal),*) => {$(
        impl<T: ToValue> Params for [T; $n] {
            fn values(&self) -> Vec<Value> {
                self.iter().map(ToValue::to_value).collect()
            }
        }
    )*};
}

array_params!(1, 2, 3, 4, 5, 6, 7, 8);

/// The parameters of a statement, as rusqlite's macro of the same name spells them.
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::registry::db::ToValue]
    };
    ($($p:expr),+ $(,)?) => {
        &[$(&$p as &dyn $crate::registry::db::ToValue),+] as &[&dyn $crate::registry::db::ToValue]
    };
}
pub(crate) use params;

/// One row of a result.
pub enum Row<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a postgres::Row),
}

impl Row<'_> {
    /// Column `i` read as `T`. Outside the registry rows are read through [`FromRow`], in
    /// the order of their column lists; the registry's own tests read a column by place.
    pub(super) fn get<T: FromValue>(&self, i: usize) -> Result<T> {
        let value = match self {
            Row::Sqlite(r) => {
                use rusqlite::types::ValueRef;
                match r.get_ref(i)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::Int(n),
                    ValueRef::Real(f) => Value::Real(f),
                    ValueRef::Text(t) => Value::Text(
                        std::str::from_utf8(t)
                            .map_err(|e| Error::decode(i, e))?
                            .to_string(),
                    ),
                    ValueRef::Blob(b) => Value::Blob(b.to_vec()),
                }
            }
            Row::Postgres(r) => pg_value(r, i)?,
        };
        T::from_value(value).map_err(|e| Error::decode(i, e))
    }
}

/// The columns of a row read one after another, each where the one before it ended, so
/// that no reading code names a column by its position.
pub struct Columns<'r, 'a> {
    row: &'r Row<'a>,
    at: usize,
}

impl Columns<'_, '_> {
    /// The next column read as `T`.
    pub fn next<T: FromValue>(&mut self) -> Result<T> {
        let v = self.row.get(self.at);
        self.at += 1;
        v
    }
}

/// What a row (or the next columns of one) can be read as: a column's value, a row struct
/// with its column list (see [`from_row!`]), or a tuple of those, read in order.
pub trait FromRow: Sized {
    fn read(c: &mut Columns<'_, '_>) -> Result<Self>;
}

impl<T: FromValue> FromRow for T {
    fn read(c: &mut Columns<'_, '_>) -> Result<Self> {
        c.next()
    }
}

macro_rules! tuple_from_row {
    ($($t:ident),+) => {
        impl<$($t: FromRow),+> FromRow for ($($t,)+) {
            fn read(c: &mut Columns<'_, '_>) -> Result<Self> {
                Ok(($($t::read(c)?,)+))
            }
        }
    };
}

tuple_from_row!(A, B);
tuple_from_row!(A, B, C);
tuple_from_row!(A, B, C, D);
tuple_from_row!(A, B, C, D, E);
tuple_from_row!(A, B, C, D, E, F);
tuple_from_row!(A, B, C, D, E, F, G);
tuple_from_row!(A, B, C, D, E, F, G, H);

/// The row read as `T` from its first column on: `conn.query_map(sql, params, read)`.
pub fn read<T: FromRow>(r: &Row<'_>) -> Result<T> {
    T::read(&mut Columns { row: r, at: 0 })
}

/// A row struct's column list and its reading, from one list of `field: "column"` pairs,
/// so that the two cannot drift apart: `$columns` is the list for `SELECT {$columns} FROM`,
/// and each field is read from its column, in the list's order. Fields named after a `;`
/// are not columns: they start empty (`Default`), for the caller to fill.
macro_rules! from_row {
    ($row:ty, $vis:vis $columns:ident {
        $first:ident: $first_column:literal $(, $field:ident: $column:literal)* $(,)?
        $(; $($empty:ident),+ $(,)?)?
    }) => {
        $vis const $columns: &str = concat!($first_column $(, ", ", $column)*);

        impl $crate::registry::db::FromRow for $row {
            fn read(
                c: &mut $crate::registry::db::Columns<'_, '_>,
            ) -> $crate::registry::db::Result<Self> {
                // Fields are evaluated in the order written: the columns' order.
                Ok(Self {
                    $first: c.next()?,
                    $($field: c.next()?,)*
                    $($($empty: Default::default(),)+)?
                })
            }
        }
    };
}
pub(crate) use from_row;

fn pg_value(r: &postgres::Row, i: usize) -> Result<Value> {
    let Some(column) = r.columns().get(i) else {
        return Err(Error::decode(i, "no such column"));
    };
    let ty = column.type_().clone();
    let v = if ty == Type::INT8 {
        r.try_get::<_, Option<i64>>(i)?.map(Value::Int)
    } else if ty == Type::INT4 {
        r.try_get::<_, Option<i32>>(i)?
            .map(|n| Value::Int(n.into()))
    } else if ty == Type::INT2 {
        r.try_get::<_, Option<i16>>(i)?
            .map(|n| Value::Int(n.into()))
    } else if ty == Type::BOOL {
        r.try_get::<_, Option<bool>>(i)?
            .map(|b| Value::Int(b.into()))
    } else if ty == Type::FLOAT8 {
        r.try_get::<_, Option<f64>>(i)?.map(Value::Real)
    } else if ty == Type::FLOAT4 {
        r.try_get::<_, Option<f32>>(i)?
            .map(|f| Value::Real(f.into()))
    } else if ty == Type::BYTEA {
        r.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Blob)
    } else if [Type::TEXT, Type::VARCHAR, Type::BPCHAR, Type::NAME].contains(&ty) {
        r.try_get::<_, Option<String>>(i)?.map(Value::Text)
    } else {
        return Err(Error::decode(
            i,
            format!("PostgreSQL type {ty} is not one the registry reads (cast it)"),
        ));
    };
    Ok(v.unwrap_or(Value::Null))
}

impl postgres::types::ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(n) => {
                if *ty == Type::INT8 {
                    n.to_sql(ty, out)
                } else if *ty == Type::INT4 {
                    i32::try_from(*n)?.to_sql(ty, out)
                } else if *ty == Type::INT2 {
                    i16::try_from(*n)?.to_sql(ty, out)
                } else if *ty == Type::BOOL {
                    (*n != 0).to_sql(ty, out)
                } else if *ty == Type::FLOAT8 {
                    (*n as f64).to_sql(ty, out)
                } else if *ty == Type::TEXT || *ty == Type::VARCHAR {
                    n.to_string().to_sql(ty, out)
                } else {
                    Err(format!("an integer for a parameter of type {ty}").into())
                }
            }
            Value::Real(f) => f.to_sql(ty, out),
            // PostgreSQL's text cannot hold NUL, which a partner's file can: it is stored
            // as U+FFFD, here and in every parameter compared with it, so the same value
            // still finds its row (and a NUL and a U+FFFD in one place are one value).
            Value::Text(s) if s.contains('\0') => s.replace('\0', "\u{FFFD}").to_sql(ty, out),
            Value::Text(s) => s.as_str().to_sql(ty, out),
            Value::Blob(b) => {
                if *ty == Type::BYTEA {
                    b.as_slice().to_sql(ty, out)
                } else {
                    Err(format!("a blob for a parameter of type {ty}").into())
                }
            }
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// `?N` (and a bare `?`, numbered in order) as PostgreSQL's `$N`, everywhere but where a
/// `?` is not a parameter: quoted text (`'…'`), quoted names (`"…"`), comments (`-- …` to
/// the line's end, `/* … */`, which PostgreSQL nests) and dollar-quoted text (`$$…$$`,
/// `$tag$…$tag$`). Everything is copied as it is; only the parameters change.
fn dollar_parameters(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut next = 0usize;
    let mut rest = sql;
    // After a name or keyword a `$` belongs to it (`a$1`), as PostgreSQL reads it.
    let mut in_word = false;
    while let Some(c) = rest.chars().next() {
        let verbatim = match c {
            '\'' | '"' => quoted(rest, c),
            '-' if rest.starts_with("--") => rest.find('\n').unwrap_or(rest.len()),
            '/' if rest.starts_with("/*") => block_comment(rest),
            '$' if !in_word => dollar_quoted(rest).unwrap_or(1),
            '?' => {
                out.push('$');
                let digits = rest[1..]
                    .find(|d: char| !d.is_ascii_digit())
                    .unwrap_or(rest.len() - 1);
                if digits == 0 {
                    next += 1;
                    out.push_str(&next.to_string());
                }
                out.push_str(&rest[1..1 + digits]);
                rest = &rest[1 + digits..];
                in_word = false;
                continue;
            }
            c => c.len_utf8(),
        };
        in_word = verbatim == c.len_utf8() && (c.is_alphanumeric() || c == '_' || c == '$');
        let (copied, after) = rest.split_at(verbatim.min(rest.len()));
        out.push_str(copied);
        rest = after;
    }
    out
}

/// The length of the quoted text or name `rest` begins with, its closing quote included (a
/// doubled quote inside is one quote character); all of `rest` when it is never closed.
fn quoted(rest: &str, quote: char) -> usize {
    let mut at = quote.len_utf8();
    while let Some(end) = rest[at..].find(quote) {
        at += end + 1;
        if !rest[at..].starts_with(quote) {
            return at;
        }
        at += 1;
    }
    rest.len()
}

/// The length of the comment `/* … */` that `rest` begins with, the comments nested in it
/// included, as PostgreSQL reads them; all of `rest` when it is never closed.
fn block_comment(rest: &str) -> usize {
    let mut depth = 0usize;
    let mut at = 0;
    while at < rest.len() {
        if rest[at..].starts_with("/*") {
            depth += 1;
            at += 2;
        } else if rest[at..].starts_with("*/") {
            depth -= 1;
            at += 2;
            if depth == 0 {
                return at;
            }
        } else {
            at += rest[at..].chars().next().map_or(1, char::len_utf8);
        }
    }
    rest.len()
}

/// The length of the dollar-quoted text `rest` begins with (`$$…$$` or `$tag$…$tag$`, a tag
/// being a name: letters, digits and `_`, not beginning with a digit), both delimiters
/// included; all of `rest` when it is never closed. `None` when `rest` does not begin one
/// (a `$1` parameter, a `$` inside a name).
fn dollar_quoted(rest: &str) -> Option<usize> {
    let tag_len = rest[1..].find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    if !rest[1 + tag_len..].starts_with('$') || rest[1..].starts_with(|c: char| c.is_ascii_digit())
    {
        return None;
    }
    let tag = &rest[..tag_len + 2];
    Some(
        rest[tag.len()..]
            .find(tag)
            .map_or(rest.len(), |end| tag.len() + end + tag.len()),
    )
}

/// Runs `f`, which blocks on the connection's own small runtime, also where it is called
/// from a task of the gateway's runtime (the watcher, the web page): the worker thread hands
/// its other tasks off meanwhile.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Opens a connection on the runtime given, which then drives it: the client and the task
/// of the connection.
pub type Connect = Box<
    dyn Fn(
            &tokio::runtime::Runtime,
        ) -> Result<
            (
                tokio_postgres::Client,
                tokio::task::JoinHandle<Result<(), postgres::Error>>,
            ),
            postgres::Error,
        > + Send,
>;

/// One open connection: the runtime that drives it (a current-thread runtime, which runs
/// the connection's task only inside our own `block_on`), the client, and that task.
struct Link {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    connection: tokio::task::JoinHandle<Result<(), postgres::Error>>,
}

impl Link {
    fn open(connect: &Connect) -> Result<Link> {
        // Building a current-thread runtime fails only when the OS refuses its timer or
        // I/O driver: no connection can be had then either.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::Disconnected)?;
        let (client, connection) = blocking(|| connect(&runtime))?;
        Ok(Link {
            runtime,
            client,
            connection,
        })
    }

    /// Lets the connection's task read what the server sent while nobody asked (the task
    /// runs only inside our own `block_on`): a session the server ended meanwhile (a
    /// restart, a failover, an administrator) has sent its last words and closed, and the
    /// task ends on them, so that [`Pg::ready`] opens a new connection before anything is
    /// sent on the dead one. Two yields: the first lets the runtime poll the socket, which
    /// wakes the task; the second lets the task run before we return.
    fn settle(&self) {
        blocking(|| {
            self.runtime.block_on(async {
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
            });
        });
    }

    /// Closes the connection politely (the server logs no lost client) and stops the
    /// runtime, both of which block.
    fn close(self) {
        let Link {
            runtime,
            client,
            connection,
        } = self;
        drop(client);
        blocking(|| {
            runtime.block_on(async {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), connection).await;
            });
            drop(runtime);
        });
    }
}

/// One statement of an exchange.
enum Request<'s> {
    Execute(&'s postgres::Statement, &'s [Value]),
    Query(&'s postgres::Statement, &'s [Value]),
    /// Statements without parameters, in the simple protocol.
    Simple(&'s str),
}

enum Answer {
    Count(u64),
    Rows(Vec<postgres::Row>),
    Done,
}

impl Answer {
    fn rows(self) -> Vec<postgres::Row> {
        match self {
            Answer::Rows(rows) => rows,
            _ => Vec::new(),
        }
    }
}

/// Whether the server ended the session with this error, or the connection is gone.
fn ends_session(e: &Error) -> bool {
    match e {
        Error::Postgres(e) => {
            e.is_closed()
                || e.as_db_error()
                    .is_some_and(|d| matches!(d.severity(), "FATAL" | "PANIC"))
        }
        Error::Disconnected(_) => true,
        _ => false,
    }
}

/// Whether `sql` only reads (a `SELECT`; the registry's selects call no function that
/// writes), so that running it again on a new connection cannot do anything twice.
fn reads_only(sql: &str) -> bool {
    sql.trim_start()
        .get(..6)
        .is_some_and(|w| w.eq_ignore_ascii_case("select"))
}

/// Writes kept waiting at most: a transaction of many writes and no read (a prune) sends
/// them in rounds of this many, so their parameters do not pile up.
const MAX_PENDING: usize = 256;

fn sql_params(values: &[Value]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    values
        .iter()
        .map(|v| v as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

pub struct Pg {
    link: Option<Link>,
    statements: HashMap<String, postgres::Statement>,
    connect: Connect,
    /// Writes inside the open transaction whose outcome nobody waits for ([`Conn::write`]):
    /// sent with the next statement that is waited for, or the COMMIT, in one round trip.
    pending: Vec<(postgres::Statement, Vec<Value>)>,
    in_transaction: bool,
    /// A statement failed inside the open transaction (which the server then aborted).
    aborted: bool,
}

impl Drop for Pg {
    fn drop(&mut self) {
        if let Some(link) = self.link.take() {
            link.close();
        }
    }
}

impl Pg {
    pub fn new(connect: Connect) -> Result<Pg> {
        Ok(Pg {
            link: Some(Link::open(&connect)?),
            statements: HashMap::new(),
            connect,
            pending: Vec::new(),
            in_transaction: false,
            aborted: false,
        })
    }

    /// A connection lost between transactions (a server restart, a failover) is opened
    /// again; inside a transaction the error stands and the transaction is lost with it.
    fn ready(&mut self) -> Result<&Link> {
        if !self.in_transaction {
            if let Some(link) = &self.link {
                link.settle();
            }
        }
        let lost = self.link.as_ref().is_none_or(|l| l.client.is_closed());
        if lost && !self.in_transaction {
            if let Some(old) = self.link.take() {
                old.close();
            }
            self.statements.clear();
            self.link = Some(Link::open(&self.connect)?);
        }
        self.link
            .as_ref()
            .ok_or_else(|| Error::Disconnected(std::io::Error::other("the connection was lost")))
    }

    /// The prepared statement for `sql`, cached by its text. The server infers each
    /// parameter's type from its first place, so a parameter that is only tested somewhere
    /// (`?1 IS NULL`) is used first where its type shows (`partner = ?1 OR ?1 IS NULL`).
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement> {
        // First: a connection opened again forgets the statements prepared on the old one.
        self.ready()?;
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let in_transaction = self.in_transaction;
        let link = self.ready()?;
        let prepared = blocking(|| {
            link.runtime
                .block_on(link.client.prepare(&dollar_parameters(sql)))
        });
        let s = prepared.map_err(|cause| {
            self.aborted |= in_transaction;
            Error::Statement {
                sql: crate::text::shortened(sql.trim(), 240).into_owned(),
                cause,
            }
        })?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    /// Sends the pending writes and then `asked`, all at once (pipelined, in this order),
    /// and waits for every answer: the answers to `asked`; the first error in that order is
    /// the exchange's.
    fn exchange(&mut self, asked: Vec<Request<'_>>) -> Result<Vec<Answer>> {
        let pending = std::mem::take(&mut self.pending);
        let in_transaction = self.in_transaction;
        let link = self.ready()?;
        let steps = pending
            .iter()
            .map(|(s, v)| Request::Execute(s, v))
            .chain(asked)
            .collect();
        let out = Self::send(link, steps);
        if let Err(e) = &out {
            self.aborted |= in_transaction;
            // The server ended the session (a restart, a failover, an administrator): the
            // connection's task may not have seen the socket close yet, so the client would
            // still look open. Closed now, it is opened again at the next transaction.
            if ends_session(e) {
                if let Some(link) = self.link.take() {
                    link.close();
                }
            }
        }
        out.map(|mut answers| answers.split_off(pending.len().min(answers.len())))
    }

    /// One exchange whose one asked statement's answer is the result.
    fn ask(&mut self, asked: Request<'_>) -> Result<Answer> {
        self.exchange(vec![asked])?.pop().ok_or_else(missing_answer)
    }

    fn send(link: &Link, steps: Vec<Request<'_>>) -> Result<Vec<Answer>> {
        use futures_util::future::{maybe_done, MaybeDone};
        use std::future::Future;
        use std::pin::Pin;
        type Step<'a> = Pin<
            Box<MaybeDone<Pin<Box<dyn Future<Output = Result<Answer, postgres::Error>> + 'a>>>>,
        >;

        let client = &link.client;
        let params: Vec<_> = steps
            .iter()
            .map(|step| match step {
                Request::Execute(_, v) | Request::Query(_, v) => sql_params(v),
                Request::Simple(_) => Vec::new(),
            })
            .collect();
        let mut futures: Vec<Step<'_>> =
            steps
                .into_iter()
                .zip(&params)
                .map(|(step, p)| -> Step<'_> {
                    Box::pin(maybe_done(match step {
                        Request::Execute(s, _) => {
                            Box::pin(async move { client.execute(s, p).await.map(Answer::Count) })
                        }
                        Request::Query(s, _) => {
                            Box::pin(async move { client.query(s, p).await.map(Answer::Rows) })
                        }
                        Request::Simple(sql) => Box::pin(async move {
                            client.batch_execute(sql).await.map(|()| Answer::Done)
                        }),
                    }))
                })
                .collect();
        let answers: Vec<Option<Result<Answer, postgres::Error>>> = blocking(|| {
            link.runtime.block_on(async {
                // A request is sent when its future is first polled: one poll each, in
                // order, sends them all before any answer is awaited.
                for future in &mut futures {
                    let _ = futures_util::poll!(future.as_mut());
                }
                for future in &mut futures {
                    future.as_mut().await;
                }
                futures
                    .iter_mut()
                    .map(|f| f.as_mut().take_output())
                    .collect()
            })
        });
        let mut out = Vec::with_capacity(answers.len());
        for answer in answers {
            match answer {
                Some(Ok(a)) => out.push(a),
                Some(Err(e)) => return Err(Error::Postgres(e)),
                // Every step was awaited to its end, so each has its output.
                None => return Err(missing_answer()),
            }
        }
        Ok(out)
    }

    fn run(&mut self, sql: &str, values: &[Value], query: bool) -> Result<Answer> {
        let once = |p: &mut Self| {
            let statement = p.statement(sql)?;
            p.ask(if query {
                Request::Query(&statement, values)
            } else {
                Request::Execute(&statement, values)
            })
        };
        match once(self) {
            Err(e) if self.may_read_again(&e, &[sql]) => once(self),
            other => other,
        }
    }

    /// Whether statements `sql` that failed with `e` are asked once more, on a new
    /// connection: only when the session is gone (the server ended it while the request was
    /// on its way), outside a transaction (inside one, the transaction is lost with the
    /// session and the caller decides: see [`Conn::transaction`] for BEGIN), with no write
    /// of ours sent along, and when every statement only reads. A write outside a
    /// transaction is never sent again: the server may have committed it before the session
    /// ended, and a second run would do it twice (a control number taken twice). Those are
    /// sent again only when the dead session is noticed before they are sent at all
    /// ([`Link::settle`]).
    fn may_read_again(&self, e: &Error, sql: &[&str]) -> bool {
        ends_session(e) && !self.in_transaction && sql.iter().all(|s| reads_only(s))
    }
}

fn missing_answer() -> Error {
    Error::Disconnected(std::io::Error::other(
        "an answer of the server went missing",
    ))
}

/// A connection to either store.
pub enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres(Box<RefCell<Pg>>),
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_postgres() {
            "Conn::Postgres"
        } else {
            "Conn::Sqlite"
        })
    }
}

impl Conn {
    pub fn is_postgres(&self) -> bool {
        matches!(self, Conn::Postgres(_))
    }

    /// The SQLite connection, for what only SQLite has (backup, pragmas).
    pub fn sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Conn::Sqlite(c) => Some(c),
            Conn::Postgres(_) => None,
        }
    }

    /// Whether the server ended this connection's session (a restart, a failover, an
    /// administrator) since it was last opened: inside a transaction, the transaction is
    /// gone with it, rolled back by the server whole. Never on SQLite.
    pub fn session_lost(&self) -> bool {
        match self {
            Conn::Sqlite(_) => false,
            Conn::Postgres(p) => p
                .borrow()
                .link
                .as_ref()
                .is_none_or(|l| l.client.is_closed()),
        }
    }

    /// Runs `sql` (several statements, no parameters).
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match self {
            Conn::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Conn::Postgres(p) => p.borrow_mut().ask(Request::Simple(sql)).map(drop),
        }
    }

    /// The bytes of the values written and not yet sent (tests of what a write may queue).
    #[cfg(test)]
    pub fn queued_bytes(&self) -> usize {
        match self {
            Conn::Postgres(p) => p
                .borrow()
                .pending
                .iter()
                .flat_map(|(_, values)| values)
                .map(|v| match v {
                    Value::Text(t) => t.len(),
                    Value::Blob(b) => b.len(),
                    _ => 8,
                })
                .sum(),
            Conn::Sqlite(_) => 0,
        }
    }

    /// Runs one statement whose outcome nobody reads (the rows it changed are not asked
    /// for). Inside a PostgreSQL transaction it is sent with the next statement that is
    /// waited for, or the COMMIT, in the same round trip; an error of it is then that
    /// statement's, and the transaction's, as any failed statement's is.
    pub fn write(&self, sql: &str, params: impl Params) -> Result<()> {
        match self {
            Conn::Postgres(p) if p.borrow().in_transaction => {
                let mut p = p.borrow_mut();
                let statement = p.statement(sql)?;
                p.pending.push((statement, params.values()));
                if p.pending.len() >= MAX_PENDING {
                    p.exchange(Vec::new())?;
                }
                Ok(())
            }
            _ => self.execute(sql, params).map(drop),
        }
    }

    /// Runs one statement; the number of rows it changed.
    pub fn execute(&self, sql: &str, params: impl Params) -> Result<usize> {
        let values = params.values();
        match self {
            Conn::Sqlite(c) => Ok(c
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(values.iter()))?),
            Conn::Postgres(p) => match p.borrow_mut().run(sql, &values, false)? {
                Answer::Count(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
                _ => Ok(0),
            },
        }
    }

    /// Runs `sql` once for each set of parameters, in order: the rows each run changed. On
    /// PostgreSQL all are sent at once, one round trip for them all.
    pub fn execute_many(&self, sql: &str, runs: &[Vec<Value>]) -> Result<Vec<usize>> {
        match self {
            Conn::Sqlite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                runs.iter()
                    .map(|values| Ok(stmt.execute(rusqlite::params_from_iter(values.iter()))?))
                    .collect()
            }
            Conn::Postgres(p) => {
                let mut p = p.borrow_mut();
                let statement = p.statement(sql)?;
                let asked = runs
                    .iter()
                    .map(|values| Request::Execute(&statement, values))
                    .collect();
                Ok(p.exchange(asked)?
                    .into_iter()
                    .map(|a| match a {
                        Answer::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
                        _ => 0,
                    })
                    .collect())
            }
        }
    }

    /// Runs the query `sql` once for each set of parameters, in order: every row of each
    /// run, read by `f`. On PostgreSQL all are sent at once, one round trip for them all.
    pub fn query_each<T>(
        &self,
        sql: &str,
        runs: &[Vec<Value>],
        f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<Vec<T>>> {
        let runs: Vec<(&str, &[Value])> = runs.iter().map(|v| (sql, v.as_slice())).collect();
        self.query_batch(&runs, f)
    }

    /// Runs each query with its parameters, in order: every row of each, read by `f`. On
    /// PostgreSQL all are sent at once, one round trip for them all.
    pub fn query_batch<T>(
        &self,
        runs: &[(&str, &[Value])],
        mut f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<Vec<T>>> {
        match self {
            // Each run's rows collected as they are read (not as a list of results first,
            // several times their size: an interchange's sightings are a million ids).
            Conn::Sqlite(c) => runs
                .iter()
                .map(|(sql, values)| {
                    let mut stmt = c.prepare_cached(sql)?;
                    let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
                    let mut out = Vec::new();
                    while let Some(r) = rows.next()? {
                        out.push(f(&Row::Sqlite(r))?);
                    }
                    Ok(out)
                })
                .collect(),
            Conn::Postgres(p) => {
                let answers = {
                    let mut p = p.borrow_mut();
                    let once = |p: &mut Pg| {
                        let statements = runs
                            .iter()
                            .map(|(sql, _)| p.statement(sql))
                            .collect::<Result<Vec<_>>>()?;
                        let asked = statements
                            .iter()
                            .zip(runs)
                            .map(|(statement, (_, values))| Request::Query(statement, values))
                            .collect();
                        p.exchange(asked)
                    };
                    let sql: Vec<&str> = runs.iter().map(|(sql, _)| *sql).collect();
                    match once(&mut p) {
                        Err(e) if p.may_read_again(&e, &sql) => once(&mut p)?,
                        other => other?,
                    }
                };
                answers
                    .into_iter()
                    .map(|a| a.rows().iter().map(|r| f(&Row::Postgres(r))).collect())
                    .collect()
            }
        }
    }

    /// The first row of `sql`, read by `f`; [`Error::NoRows`] when there is none.
    pub fn query_row<T>(
        &self,
        sql: &str,
        params: impl Params,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        let values = params.values();
        match self {
            Conn::Sqlite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
                match rows.next()? {
                    Some(r) => f(&Row::Sqlite(r)),
                    None => Err(Error::NoRows),
                }
            }
            Conn::Postgres(p) => {
                let rows = p.borrow_mut().run(sql, &values, true)?.rows();
                match rows.first() {
                    Some(r) => f(&Row::Postgres(r)),
                    None => Err(Error::NoRows),
                }
            }
        }
    }

    /// Every row of `sql`, each read by `f`.
    pub fn query_map<T>(
        &self,
        sql: &str,
        params: impl Params,
        mut f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<std::vec::IntoIter<Result<T>>> {
        let values = params.values();
        let mut out = Vec::new();
        match self {
            Conn::Sqlite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(values.iter()))?;
                loop {
                    match rows.next() {
                        Ok(Some(r)) => out.push(f(&Row::Sqlite(r))),
                        Ok(None) => break,
                        Err(e) => {
                            out.push(Err(e.into()));
                            break;
                        }
                    }
                }
            }
            Conn::Postgres(p) => {
                let rows = p.borrow_mut().run(sql, &values, true)?.rows();
                out.extend(rows.iter().map(|r| f(&Row::Postgres(r))));
            }
        }
        Ok(out.into_iter())
    }

    /// A statement to run later, as rusqlite's `prepare_cached` (statements are cached by
    /// their text on both backends either way).
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement {
            conn: self,
            sql: sql.to_string(),
        })
    }

    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        self.prepare_cached(sql)
    }

    /// Begins a write transaction that excludes every other writer (see the module's
    /// comment); rolled back when dropped uncommitted.
    pub fn transaction(&mut self) -> Result<Transaction<'_>> {
        match self {
            Conn::Sqlite(c) => c.execute_batch("BEGIN IMMEDIATE")?,
            Conn::Postgres(p) => {
                let mut p = p.borrow_mut();
                let begin = format!("BEGIN; SELECT pg_advisory_xact_lock({WRITER_LOCK})");
                // A session the server ended while we were idle is found here, at the first
                // statement of the transaction: nothing of it has run, so it is begun once
                // more on a new connection. (A session lost later in the transaction loses
                // the transaction with it; its error stands, and the caller's work is
                // decided again by its claims and leases, never committed twice: a COMMIT
                // whose answer was lost is never sent again.)
                let mut tries = 0;
                loop {
                    tries += 1;
                    p.ready()?;
                    p.in_transaction = true;
                    p.aborted = false;
                    p.pending.clear();
                    match p.ask(Request::Simple(&begin)) {
                        Ok(_) => break,
                        Err(e) => {
                            p.in_transaction = false;
                            if ends_session(&e) && tries == 1 {
                                continue;
                            }
                            let _ = p.ask(Request::Simple("ROLLBACK"));
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(Transaction {
            conn: self,
            done: false,
        })
    }

    fn end(&self, commit: bool) -> Result<()> {
        let p = match self {
            Conn::Sqlite(c) => {
                return Ok(c.execute_batch(if commit { "COMMIT" } else { "ROLLBACK" })?)
            }
            Conn::Postgres(p) => p,
        };
        let mut p = p.borrow_mut();
        // A transaction one of whose statements failed (an error someone ignored) is lost on
        // PostgreSQL: say so rather than let its COMMIT report success. Its writes still
        // waiting are sent with the COMMIT: one of them failing makes the COMMIT a rollback,
        // and the error is the commit's.
        let out = if p.aborted || !commit {
            p.pending.clear();
            let rolled_back = p.ask(Request::Simple("ROLLBACK")).map(drop);
            if p.aborted {
                rolled_back.and(Err(Error::Aborted))
            } else {
                rolled_back
            }
        } else {
            p.ask(Request::Simple("COMMIT")).map(drop)
        };
        p.pending.clear();
        p.in_transaction = false;
        out
    }
}

/// A parameter as SQLite reads it, borrowed: a statement's values are not copied again (an
/// interchange's acknowledgment of a million sets is one parameter).
impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::ValueRef;
        Ok(rusqlite::types::ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(n) => ValueRef::Integer(*n),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// A statement of [`Conn::prepare_cached`].
pub struct Statement<'c> {
    conn: &'c Conn,
    sql: String,
}

impl Statement<'_> {
    pub fn execute(&mut self, params: impl Params) -> Result<usize> {
        self.conn.execute(&self.sql, params)
    }

    /// As [`Conn::write`].
    pub fn write(&mut self, params: impl Params) -> Result<()> {
        self.conn.write(&self.sql, params)
    }

    pub fn query_row<T>(
        &mut self,
        params: impl Params,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        self.conn.query_row(&self.sql, params, f)
    }

    pub fn query_map<T>(
        &mut self,
        params: impl Params,
        f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<std::vec::IntoIter<Result<T>>> {
        self.conn.query_map(&self.sql, params, f)
    }
}

/// A write transaction of [`Conn::transaction`].
pub struct Transaction<'c> {
    conn: &'c Conn,
    done: bool,
}

impl Transaction<'_> {
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        self.conn.end(true)
    }
}

impl std::ops::Deref for Transaction<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.conn.end(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_numbered_for_postgres_outside_quoted_text() {
        assert_eq!(
            dollar_parameters("SELECT ?1, '?2', ?12 FROM t"),
            "SELECT $1, '?2', $12 FROM t"
        );
        assert_eq!(
            dollar_parameters("SELECT a FROM t WHERE a = ? AND b = ?"),
            "SELECT a FROM t WHERE a = $1 AND b = $2"
        );
    }

    #[test]
    fn quoted_text_and_names_keep_their_question_marks() {
        assert_eq!(
            dollar_parameters("SELECT 'it''s ?1', \"a?\"\"b\", ?2"),
            "SELECT 'it''s ?1', \"a?\"\"b\", $2"
        );
        // Unclosed: the rest is quoted, as the server will say.
        assert_eq!(dollar_parameters("SELECT ?1, 'x ?2"), "SELECT $1, 'x ?2");
    }

    #[test]
    fn comments_keep_their_question_marks() {
        assert_eq!(
            dollar_parameters("SELECT ?1 -- why ?2\n, ?3 /* a ?4 /* nested ?5 */ ?6 */ , ?7"),
            "SELECT $1 -- why ?2\n, $3 /* a ?4 /* nested ?5 */ ?6 */ , $7"
        );
        assert_eq!(dollar_parameters("SELECT ? -- ?"), "SELECT $1 -- ?");
        assert_eq!(
            dollar_parameters("SELECT 1 - ?1, 2 / ?2"),
            "SELECT 1 - $1, 2 / $2"
        );
    }

    #[test]
    fn dollar_quoted_text_keeps_its_question_marks() {
        assert_eq!(
            dollar_parameters("SELECT $$ ?1 $$, $f$ ? $$ ?2 $f$, ?3"),
            "SELECT $$ ?1 $$, $f$ ? $$ ?2 $f$, $3"
        );
        // `$1` is a parameter already and `a$b` a name, neither a quote.
        assert_eq!(
            dollar_parameters("SELECT $1, a$b$ + ?2, ?3"),
            "SELECT $1, a$b$ + $2, $3"
        );
        assert_eq!(dollar_parameters("SELECT ?1, $$ ?2"), "SELECT $1, $$ ?2");
        assert_eq!(
            dollar_parameters("SELECT 'é?', ?1 $é$ ? $é$"),
            "SELECT 'é?', $1 $é$ ? $é$"
        );
    }
}
