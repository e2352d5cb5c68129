//! leakcheck agent for sqlx (PostgreSQL): one client slot, JSON lines on stdin/stdout (agent protocol 1).
//!
//! query and execute = `raw_sql` (the simple query protocol); prepared = `query(text)`, persistent by
//! default, whose statement cache prepares named statements sqlx_s_<N> (N counted per connection;
//! the `statement_cache_capacity` and `persistent` settings turn it off); begin/commit/rollback =
//! `Connection::begin` and its Transaction. sqlx has no cancel request and drops the notifications
//! an ordinary connection receives (only a PgListener, a connection of its own, keeps them): the
//! hello says both (`no_cancel`, `no_notifications`), and no ParameterStatus value is public.

use std::str::FromStr;
use std::time::Duration;

use serde_json::{json, Map, Value};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgRow, PgValueFormat};
use sqlx::{AssertSqlSafe, Column, Connection, Postgres, Row, Transaction, TypeInfo, ValueRef};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};

mod protocol; // shared with the tokio-postgres agent
use protocol::{float, Answer, Failure};

const SETTINGS: &[&str] = &["statement_cache_capacity", "persistent", "options", "application_name"];

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) => Failure::driver(db.code().as_deref().unwrap_or_default(),
                                                         "sqlx::postgres::PgDatabaseError", db.message()),
            sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => Failure::driver("08006", "sqlx::Error", &e.to_string()),
            _ => Failure::driver("", "sqlx::Error", &e.to_string()),
        }
    }
}

/// One open connection and how the application's prepared path uses sqlx's statement cache.
struct Session {
    conn: PgConnection,
    persistent: bool,
}

struct Requests(Lines<BufReader<Stdin>>);

impl Requests {
    /// The next request (a line that is not one is answered here), or None at the end of stdin.
    async fn next(&mut self) -> Option<Value> {
        while let Ok(Some(line)) = self.0.next_line().await {
            match serde_json::from_str::<Value>(&line) {
                _ if line.trim().is_empty() => {}
                Ok(request) => return Some(request),
                Err(e) => send(Value::Null, Err(Failure::usage("usage", format!("bad request line: {e}")))),
            }
        }
        None
    }
}

fn send(id: Value, answer: Answer) {
    protocol::send(protocol::reply(id, answer));
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut requests = Requests(BufReader::new(tokio::io::stdin()).lines());
    let mut session: Option<Session> = None;
    let mut pending: Option<Value> = None;
    loop {
        let request = match pending.take() {
            Some(request) => request,
            None => match requests.next().await {
                Some(request) => request,
                None => break,
            },
        };
        let id = request["id"].clone();
        let op = request["op"].as_str().unwrap_or_default().to_string();
        let answer = match (op.as_str(), session.as_mut()) {
            ("hello", _) => Ok(hello()),
            ("connect", _) => {
                close(session.take()).await;
                connect(&request).await.map(|opened| {
                    session = Some(opened);
                    Map::new()
                })
            }
            ("close" | "exit", _) => {
                close(session.take()).await;
                Ok(Map::new())
            }
            ("cancel", _) => Err(Failure::usage("unsupported", "sqlx has no cancel request")),
            (_, None) => Err(Failure::usage("usage", "not connected: send connect first")),
            ("begin", Some(open)) => match open.conn.begin().await {
                Ok(transaction) => {
                    send(id, Ok(Map::new()));
                    pending = in_transaction(transaction, open.persistent, &mut requests).await;
                    continue;
                }
                Err(e) => Err(e.into()),
            },
            ("commit" | "rollback", Some(_)) => Err(Failure::usage("usage", "no transaction begun through sqlx")),
            (_, Some(open)) => statement(&mut open.conn, open.persistent, &op, &request).await,
        };
        send(id, answer);
        if op == "exit" {
            break;
        }
    }
    std::process::exit(0); // now: the runtime's end would wait for tokio's blocking read of stdin
}

/// Requests inside a transaction, through it, until commit or rollback (answered here) or a request
/// that ends the connection (returned: the transaction is dropped, which rolls it back).
async fn in_transaction(mut transaction: Transaction<'_, Postgres>, persistent: bool, requests: &mut Requests) -> Option<Value> {
    loop {
        let request = requests.next().await?;
        let op = request["op"].as_str().unwrap_or_default().to_string();
        let answer = match op.as_str() {
            "hello" => Ok(hello()),
            "commit" | "rollback" => {
                let done = if op == "commit" { transaction.commit().await } else { transaction.rollback().await };
                send(request["id"].clone(), done.map(|_| Map::new()).map_err(Failure::from));
                return None;
            }
            "begin" => Err(Failure::usage("usage", "a transaction is already begun")),
            "cancel" => Err(Failure::usage("unsupported", "sqlx has no cancel request")),
            "connect" | "close" | "exit" => return Some(request),
            _ => statement(&mut transaction, persistent, &op, &request).await,
        };
        send(request["id"].clone(), answer);
    }
}

/// The ops that run a statement, on the connection or inside its transaction.
async fn statement(conn: &mut PgConnection, persistent: bool, op: &str, request: &Value) -> Answer {
    let sql = request["sql"].as_str().unwrap_or_default().to_string();
    let mut answer = Map::new();
    match op {
        "query" => {
            answer.insert("rows".into(), rows(&sqlx::raw_sql(AssertSqlSafe(sql)).fetch_all(conn).await?));
        }
        "execute" => {
            sqlx::raw_sql(AssertSqlSafe(sql)).execute(conn).await?;
        }
        "prepared" => {
            for _ in 0..request["times"].as_u64().unwrap_or(1).max(1) {
                let done = sqlx::query(AssertSqlSafe(sql.clone())).persistent(persistent).fetch_all(&mut *conn).await?;
                answer.insert("rows".into(), rows(&done));
            }
        }
        "free" => return Err(Failure::usage("unsupported", "sqlx drops no single cached statement \
                                                            (clear_cached_statements drops every one)")),
        _ => return Err(Failure::usage("usage", format!("unknown op {op}"))),
    }
    Ok(answer)
}

fn hello() -> Map<String, Value> {
    let mut answer = protocol::hello("sqlx", "sqlx");
    answer.insert("no_cancel".into(), json!("sqlx has no cancel request (dropping a query's future sends none)"));
    answer.insert("no_notifications".into(), json!("sqlx's PgConnection drops the notifications it receives \
                                                     (only a PgListener, a connection of its own, keeps them)"));
    answer
}

async fn connect(request: &Value) -> Result<Session, Failure> {
    let text = |key: &str| request[key].as_str().unwrap_or_default().to_string();
    let host = text("host");
    let mut options = PgConnectOptions::new_without_pgpass().port(request["port"].as_u64().unwrap_or(5432) as u16)
        .username(&text("user")).password(&text("password")).database(&text("dbname"));
    options = if host.starts_with('/') { options.socket(&host) } else { options.host(&host) };
    let mut persistent = true;
    for (name, value) in request["settings"].as_object().into_iter().flatten() {
        let value = value.as_str().unwrap_or_default();
        let wrong = |what: &str| Failure::usage("usage", format!("{name} is {what}, not {value:?}"));
        match name.as_str() {
            "statement_cache_capacity" => options = options.statement_cache_capacity(value.parse().map_err(|_| wrong("a count"))?),
            "persistent" => persistent = bool::from_str(value).map_err(|_| wrong("true or false"))?,
            "options" => options = options.options(startup_options(value).ok_or_else(|| wrong("-c name=value ..."))?),
            "application_name" => options = options.application_name(value),
            _ => return Err(Failure::usage("usage", format!("unknown sqlx setting {name} (known: {SETTINGS:?})"))),
        }
    }
    match tokio::time::timeout(Duration::from_secs(10), PgConnection::connect_with(&options)).await {
        Ok(conn) => Ok(Session { conn: conn?, persistent }),
        Err(_) => Err(Failure::driver("08001", "sqlx::Error", "connect timed out after 10 s")),
    }
}

/// libpq's `options` text (`-c name=value -c ...`) as the pairs sqlx's `options()` takes.
fn startup_options(text: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        let pair = match word {
            "-c" => words.next()?,
            _ => word.strip_prefix("-c").or_else(|| word.strip_prefix("--")).filter(|p| !p.is_empty())?,
        };
        let (name, value) = pair.split_once('=')?;
        pairs.push((name.to_string(), value.to_string()));
    }
    Some(pairs)
}

async fn close(session: Option<Session>) {
    if let Some(open) = session {
        if let Err(e) = open.conn.close().await {
            eprintln!("agent: close: {e}");
        }
    }
}

fn rows(rows: &[PgRow]) -> Value {
    rows.iter().map(|row| (0..row.len()).map(|i| value(row, i)).collect::<Value>()).collect()
}

/// A column as the protocol wants it: JSON null, bool, number, array, else PostgreSQL's text form
/// (raw_sql's values are text; a prepared run's are binary, decoded by sqlx for the common types).
fn value(row: &PgRow, i: usize) -> Value {
    let kind = row.column(i).type_info().name().to_string();
    let Ok(raw) = row.try_get_raw(i) else { return Value::Null };
    if raw.is_null() {
        return Value::Null;
    }
    if raw.format() == PgValueFormat::Text {
        return raw.as_str().map(|text| scalar(&kind, text)).unwrap_or(Value::Null);
    }
    let decoded = match kind.as_str() {
        "BOOL" => row.try_get::<bool, _>(i).map(Value::from),
        "INT2" => row.try_get::<i16, _>(i).map(Value::from),
        "INT4" => row.try_get::<i32, _>(i).map(Value::from),
        "INT8" => row.try_get::<i64, _>(i).map(Value::from),
        "FLOAT4" => row.try_get::<f32, _>(i).map(|f| float(f.into())),
        "FLOAT8" => row.try_get::<f64, _>(i).map(float),
        "TEXT" | "VARCHAR" | "NAME" | "BPCHAR" | "UNKNOWN" => row.try_get_unchecked::<String, _>(i).map(Value::from),
        _ => Err(sqlx::Error::ColumnNotFound(kind)), // no decoder here: its bytes below
    };
    decoded.unwrap_or_else(|_| {
        let bytes = raw.as_bytes().unwrap_or_default();
        json!(format!("\\x{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
    })
}

/// A value's text form as the protocol wants it, by its type's name (arrays end in `[]`).
fn scalar(kind: &str, text: &str) -> Value {
    if let Some(element) = kind.strip_suffix("[]") {
        let Some(start) = text.find('{') else { return json!(text) }; // skips a dimension decoration
        return elements(&text[start..], &mut 0, element);
    }
    match kind {
        "INT2" | "INT4" | "INT8" | "OID" => text.parse::<i64>().map(Value::from).unwrap_or_else(|_| json!(text)),
        "FLOAT4" | "FLOAT8" => text.parse::<f64>().ok().filter(|f| f.is_finite()).map(Value::from).unwrap_or_else(|| json!(text)),
        "BOOL" => json!(text == "t"),
        _ => json!(text),
    }
}

/// One level of an array's text form (`{1,"a b",NULL,{2}}`) from `text[*at]`, its `{`, on.
fn elements(text: &str, at: &mut usize, kind: &str) -> Value {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    *at += 1;
    while *at < bytes.len() && bytes[*at] != b'}' {
        match bytes[*at] {
            b',' => *at += 1,
            b'{' => out.push(elements(text, at, kind)),
            b'"' => {
                let mut word = Vec::new();
                *at += 1;
                while *at < bytes.len() && bytes[*at] != b'"' {
                    if bytes[*at] == b'\\' {
                        *at += 1;
                    }
                    word.push(bytes[*at]);
                    *at += 1;
                }
                *at += 1;
                out.push(scalar(kind, &String::from_utf8_lossy(&word)));
            }
            _ => {
                let end = text[*at..].find([',', '}']).map_or(text.len(), |n| *at + n);
                let word = &text[*at..end];
                out.push(if word == "NULL" { Value::Null } else { scalar(kind, word) });
                *at = end;
            }
        }
    }
    *at += 1;
    Value::Array(out)
}
