//! leakcheck agent for tokio-postgres: one client slot, JSON lines on stdin/stdout (agent protocol 1).
//!
//! query = `query_typed` (the unnamed statement); execute = `batch_execute` (the simple query
//! protocol); prepared = the application's prepared path, by the `method` setting: `prepare`
//! (default: one `Client::prepare` per text, kept, then `query(&statement)`; tokio-postgres names
//! it s<N> from a counter of the whole process), `query` (`query(text)`: a statement s<N> prepared,
//! run and closed per call) or `query_typed`; free = dropping the kept Statement (tokio-postgres
//! sends Close); begin/commit/rollback = `Client::transaction`; cancel = the CancelToken's CancelRequest
//! (`cancel_query_raw` on a connection the agent opens where `cancel_query` would: the same bytes, the
//! same early shutdown of its writing side), sent from the stdin reader while the request before it
//! runs; the agent then reads that connection to its end, so it can say `closed`. Notifications and
//! ParameterStatus values come from the Connection, polled by its own task.
//!
//! connect = `Config::connect`'s two halves: the socket it would open (`socket`), then `connect_raw` on
//! it, so that the agent sees what the driver writes: every answer says whether the process's driver has
//! named a statement yet (`named`), since tokio-postgres counts s<N> over the whole process.

use std::collections::HashMap;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, BufReader, ReadBuf};
use tokio::net::{TcpSocket, UnixStream};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{AsyncMessage, CancelToken, Client, Config, GenericClient, NoTls, Row, Statement, Transaction};

mod protocol; // the sqlx agent's protocol.rs
use protocol::{float, Answer, Failure};

/// The ParameterStatus names PostgreSQL reports; the Connection answers one name at a time.
const REPORTED: &[&str] = &[
    "application_name", "client_encoding", "DateStyle", "default_transaction_read_only", "in_hot_standby",
    "integer_datetimes", "IntervalStyle", "is_superuser", "scram_iterations", "search_path", "server_encoding",
    "server_version", "session_authorization", "standard_conforming_strings", "TimeZone",
];
const SETTINGS: &[&str] = &["method", "options", "application_name"];
/// The connect's bound (tokio-postgres's connect_timeout), for the cancel's connection too.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the agent reads the cancel connection for its end: a peer that keeps it open longer gets an
/// answer without `closed` (as node-postgres's agent gives up after 5 s).
const CANCEL_WAIT: Duration = Duration::from_secs(5);

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.as_db_error() {
            Some(db) => Failure::driver(db.code().code(), "tokio_postgres::error::DbError", db.message()),
            None => {
                // the driver failed, not the server: a prepare may have taken its s<N> before its Parse was
                // written (encoding, a closed connection), so this process no longer says its counter is fresh
                NAMED.store(true, Ordering::SeqCst);
                Failure::driver(if e.is_closed() { "08006" } else { "" }, "tokio_postgres::Error", &e.to_string())
            }
        }
    }
}

/// What the Connection's task saw: notifications not yet answered, and the parameters it holds.
#[derive(Default)]
struct Seen {
    notifications: Vec<Value>,
    parameters: Map<String, Value>,
}

/// Whether this process's driver has written a Parse message with a name (any but the unnamed statement's ""):
/// tokio-postgres names every statement it prepares s<N> from one counter of the process (`Client::prepare`,
/// `query(text)`, and the statement it looks a type up with). False: the counter is where a fresh process's
/// is, so leakcheck may serve a later probe with this process (drivers/agents/client.py).
static NAMED: AtomicBool = AtomicBool::new(false);

/// A connection's socket: TCP or Unix.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The socket `Config::connect` opens (tokio-postgres's connect_socket): TCP to each address of the host in
/// turn, with TCP_NODELAY and keepalive (its defaults: on, the system's 2 h), or the Unix socket
/// .s.PGSQL.<port> in a host that is a folder; each within CONNECT_TIMEOUT.
async fn socket(host: &str, port: u16) -> std::io::Result<Box<dyn Io>> {
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out");
    if host.starts_with('/') {
        let path = format!("{host}/.s.PGSQL.{port}");
        return Ok(Box::new(timeout(CONNECT_TIMEOUT, UnixStream::connect(path)).await.map_err(|_| timed_out())??));
    }
    let mut last = std::io::Error::new(std::io::ErrorKind::InvalidInput, "could not resolve any addresses");
    for addr in tokio::net::lookup_host((host, port)).await? {
        let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        socket.set_keepalive(true)?;
        match timeout(CONNECT_TIMEOUT, socket.connect(addr)).await.map_err(|_| timed_out()) {
            Ok(Ok(stream)) => {
                stream.set_nodelay(true)?;
                return Ok(Box::new(stream));
            }
            Ok(Err(e)) | Err(e) => last = e,
        }
    }
    Err(last)
}

/// The frontend messages' type bytes tokio-postgres writes (Parse, Bind, Describe, Execute, Sync, Query, Close,
/// Flush, Terminate, CopyData, CopyDone, CopyFail, and the password and SASL responses).
const FRONTEND: &[u8] = b"PBDESQCHXdcfp";

/// A connection's socket, with what the driver writes on it read as frontend messages as it goes: a Parse
/// with a name sets NAMED. The first message (the startup packet) has no type byte; every later one has.
struct Watched {
    io: Box<dyn Io>,
    /// the message header read so far (type and length, or the startup packet's length)
    head: Vec<u8>,
    /// bytes of the current message's body still to come
    left: usize,
    /// the current message is a Parse whose name's first byte is still to come
    parse: bool,
    typed: bool,
}

impl Watched {
    fn new(io: Box<dyn Io>) -> Self {
        Watched { io, head: Vec::with_capacity(5), left: 0, parse: false, typed: false }
    }

    fn written(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.left == 0 {
                let size = if self.typed { 5 } else { 4 };
                let take = (size - self.head.len()).min(bytes.len());
                self.head.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.head.len() == size {
                    let length = u32::from_be_bytes(self.head[size - 4..].try_into().unwrap()) as usize;
                    self.parse = self.typed && self.head[0] == b'P';
                    if length < 4 || (self.typed && !FRONTEND.contains(&self.head[0])) {
                        NAMED.store(true, Ordering::SeqCst); // lost track of the messages: no longer says fresh
                    }
                    self.left = length.saturating_sub(4);
                    self.typed = true;
                    self.head.clear();
                }
                continue;
            }
            if self.parse && bytes[0] != 0 {
                NAMED.store(true, Ordering::SeqCst);
            }
            self.parse = false;
            let skip = self.left.min(bytes.len());
            self.left -= skip;
            bytes = &bytes[skip..];
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.io).poll_write(cx, buf))?;
        self.written(&buf[..written]);
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Where a connection's cancel goes: its key, and the host and port it was opened on (where
/// `CancelToken::cancel_query` would connect: a host starting with `/` is a Unix socket's folder).
#[derive(Clone)]
struct CancelTo {
    token: CancelToken,
    host: String,
    port: u16,
}

/// One open connection: its client, the application's kept statements, and what its Connection saw.
struct Session {
    client: Client,
    method: String,
    statements: HashMap<String, Statement>,
    seen: Arc<Mutex<Seen>>,
}

fn send(answer: Map<String, Value>) {
    protocol::send(answer);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let key: Arc<Mutex<Option<CancelTo>>> = Arc::default();
    let (requests, mut queue) = mpsc::unbounded_channel::<Value>();
    let reader_key = key.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(&line) {
                Ok(request) if request["op"] == "cancel" => {
                    let to = reader_key.lock().unwrap().clone();
                    tokio::spawn(async move { send(finish(request["id"].clone(), cancel(to).await, None)) });
                }
                Ok(request) => drop(requests.send(request)),
                Err(e) => send(finish(Value::Null, Err(Failure::usage("usage", format!("bad request line: {e}"))), None)),
            }
        }
    });
    let mut session: Option<Session> = None;
    let mut pending: Option<Value> = None;
    loop {
        let request = match pending.take() {
            Some(request) => request,
            None => match queue.recv().await {
                Some(request) => request,
                None => break,
            },
        };
        let id = request["id"].clone();
        let op = request["op"].as_str().unwrap_or_default().to_string();
        let answer = match (op.as_str(), session.as_mut()) {
            ("hello", _) => Ok(hello()),
            ("connect", _) => {
                session = None;
                match connect(&request).await {
                    Ok(opened) => {
                        let (host, port) = (request["host"].as_str().unwrap_or_default(), port(&request));
                        *key.lock().unwrap() = Some(CancelTo { token: opened.client.cancel_token(), host: host.into(), port });
                        session = Some(opened);
                        Ok(Map::new())
                    }
                    Err(failure) => Err(failure),
                }
            }
            ("close" | "exit", _) => {
                session = None; // the Client's drop ends its Connection (Terminate)
                *key.lock().unwrap() = None;
                Ok(Map::new())
            }
            (_, None) => Err(Failure::usage("usage", "not connected: send connect first")),
            ("begin", Some(open)) => match open.client.transaction().await {
                Ok(transaction) => {
                    send(finish(id, Ok(Map::new()), Some(&open.seen)));
                    pending = in_transaction(transaction, &open.method, &mut open.statements, &open.seen, &mut queue).await;
                    continue;
                }
                Err(e) => Err(e.into()),
            },
            ("commit" | "rollback", Some(_)) => Err(Failure::usage("usage", "no transaction begun through tokio-postgres")),
            (_, Some(open)) => statement(&open.client, &open.method, &mut open.statements, &op, &request).await,
        };
        let seen = session.as_ref().map(|s| s.seen.clone());
        settle().await;
        send(finish(id, answer, seen.as_deref()));
        if op == "exit" {
            break;
        }
    }
    std::process::exit(0); // now: the runtime's end would wait for tokio's blocking read of stdin
}

/// Requests inside a transaction, through it, until commit or rollback (answered here) or a request
/// that ends the connection (returned: the transaction is dropped, which rolls it back).
async fn in_transaction(
    transaction: Transaction<'_>, method: &str, statements: &mut HashMap<String, Statement>, seen: &Arc<Mutex<Seen>>,
    queue: &mut mpsc::UnboundedReceiver<Value>,
) -> Option<Value> {
    loop {
        let request = queue.recv().await?;
        let op = request["op"].as_str().unwrap_or_default().to_string();
        let answer = match op.as_str() {
            "hello" => Ok(hello()),
            "commit" | "rollback" => {
                let done = if op == "commit" { transaction.commit().await } else { transaction.rollback().await };
                settle().await;
                send(finish(request["id"].clone(), done.map(|_| Map::new()).map_err(Failure::from), Some(seen)));
                return None;
            }
            "begin" => Err(Failure::usage("usage", "a transaction is already begun")),
            "connect" | "close" | "exit" => return Some(request),
            _ => statement(&transaction, method, statements, &op, &request).await,
        };
        settle().await;
        send(finish(request["id"].clone(), answer, Some(seen)));
    }
}

/// The ops that run a statement, through the client or its open transaction.
async fn statement(
    client: &impl GenericClient, method: &str, statements: &mut HashMap<String, Statement>, op: &str, request: &Value,
) -> Answer {
    let sql = request["sql"].as_str().unwrap_or_default();
    let mut answer = Map::new();
    match op {
        "query" => {
            answer.insert("rows".into(), rows(&client.query_typed(sql, &[]).await?));
        }
        "execute" => client.batch_execute(sql).await?,
        "prepared" => {
            let times = request["times"].as_u64().unwrap_or(1).max(1);
            for _ in 0..times {
                let done = match method {
                    "prepare" => {
                        if !statements.contains_key(sql) {
                            statements.insert(sql.to_string(), client.prepare(sql).await?);
                        }
                        client.query(&statements[sql], &[]).await?
                    }
                    "query" => client.query(sql, &[]).await?,
                    _ => client.query_typed(sql, &[]).await?,
                };
                answer.insert("rows".into(), rows(&done));
            }
        }
        "free" => drop(statements.remove(sql)), // the Statement's drop sends its Close
        _ => return Err(Failure::usage("usage", format!("unknown op {op}"))),
    }
    Ok(answer)
}

fn hello() -> Map<String, Value> {
    protocol::hello("tokio-postgres", "tokio-postgres")
}

async fn connect(request: &Value) -> Result<Session, Failure> {
    let text = |key: &str| request[key].as_str().unwrap_or_default().to_string();
    let mut config = Config::new();
    config.user(text("user")).password(text("password")).dbname(text("dbname"));
    let mut method = "prepare".to_string();
    for (name, value) in request["settings"].as_object().into_iter().flatten() {
        let value = value.as_str().unwrap_or_default();
        match name.as_str() {
            "method" if ["prepare", "query", "query_typed"].contains(&value) => method = value.into(),
            "method" => return Err(Failure::usage("usage", format!("method is prepare, query or query_typed, not {value}"))),
            "options" => {
                config.options(value);
            }
            "application_name" => {
                config.application_name(value);
            }
            _ => return Err(Failure::usage("usage", format!("unknown tokio-postgres setting {name} (known: {SETTINGS:?})"))),
        }
    }
    // `Config::connect` is this: its socket, then the startup on it (connect_raw); opened here to watch it.
    let io = socket(&text("host"), port(request)).await.map_err(unconnected)?;
    let (client, mut connection) = config.connect_raw(Watched::new(io), NoTls).await?;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let task_seen = seen.clone();
    tokio::spawn(async move {
        loop {
            let message = poll_fn(|cx| {
                let polled = connection.poll_message(cx);
                let mut seen = task_seen.lock().unwrap();
                for name in REPORTED {
                    if let Some(value) = connection.parameter(name) {
                        seen.parameters.insert(name.to_string(), json!(value));
                    }
                }
                polled
            })
            .await;
            match message {
                Some(Ok(AsyncMessage::Notification(n))) => task_seen.lock().unwrap().notifications
                    .push(json!({"channel": n.channel(), "payload": n.payload()})),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    eprintln!("agent: connection: {e}");
                    break;
                }
                None => break,
            }
        }
    });
    Ok(Session { client, method, statements: HashMap::new(), seen })
}

fn port(request: &Value) -> u16 {
    request["port"].as_u64().unwrap_or(5432) as u16
}

/// tokio-postgres's cancel: `cancel_query_raw` writes the CancelRequest with the connection's key and shuts
/// the writing side at once, as `cancel_query` does on a connection of its own; the agent opens that
/// connection itself, where `cancel_query` would, so that it can read it afterwards: `closed` once the peer
/// ended it (it read the request; a reset counts, as Odyssey resets), else no `closed` after CANCEL_WAIT.
async fn cancel(to: Option<CancelTo>) -> Answer {
    let to = to.ok_or_else(|| Failure::usage("usage", "not connected: send connect first"))?;
    let mut stream = socket(&to.host, to.port).await.map_err(unconnected)?;
    to.token.cancel_query_raw(&mut stream, NoTls).await?;
    let mut byte = [0u8; 1];
    let closed = match timeout(CANCEL_WAIT, stream.read(&mut byte)).await {
        Ok(Ok(read)) => read == 0,
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Err(_) => false,
    };
    let mut answer = Map::new();
    if closed {
        answer.insert("closed".into(), json!(true));
    }
    Ok(answer)
}

/// A socket that could not be opened, in tokio-postgres's words for it (its Error of kind Connect).
fn unconnected(e: std::io::Error) -> Failure {
    Failure::driver("", "tokio_postgres::Error", &format!("error connecting to server: {e}"))
}

/// Lets the Connection's task read what already arrived (a notification before the answer's end).
async fn settle() {
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
}

/// The answer for request `id`, with what the Connection's task saw since the last answer when connected.
fn finish(id: Value, answer: Answer, seen: Option<&Mutex<Seen>>) -> Map<String, Value> {
    let mut out = protocol::reply(id, answer);
    out.insert("named".into(), json!(NAMED.load(Ordering::SeqCst)));
    if let Some(seen) = seen {
        let mut seen = seen.lock().unwrap();
        out.insert("notifications".into(), Value::Array(std::mem::take(&mut seen.notifications)));
        out.insert("parameters".into(), Value::Object(seen.parameters.clone()));
    }
    out
}

fn rows(rows: &[Row]) -> Value {
    rows.iter().map(|row| (0..row.len()).map(|i| value(row, i)).collect::<Value>()).collect()
}

/// A column as the protocol wants it: JSON null, bool, number, array, else PostgreSQL's text form.
fn value(row: &Row, i: usize) -> Value {
    fn get<'a, T: FromSql<'a>>(row: &'a Row, i: usize, to: impl Fn(T) -> Value) -> Option<Value> {
        row.try_get::<_, Option<T>>(i).ok().map(|v| v.map_or(Value::Null, to))
    }
    fn list<'a, T: FromSql<'a>>(row: &'a Row, i: usize, to: impl Fn(T) -> Value) -> Option<Value> {
        get::<Vec<Option<T>>>(row, i, |items| items.into_iter().map(|v| v.map_or(Value::Null, &to)).collect())
    }
    let found = match *row.columns()[i].type_() {
        Type::BOOL => get::<bool>(row, i, Value::from),
        Type::INT2 => get::<i16>(row, i, Value::from),
        Type::INT4 => get::<i32>(row, i, Value::from),
        Type::INT8 => get::<i64>(row, i, Value::from),
        Type::OID => get::<u32>(row, i, Value::from),
        Type::FLOAT4 => get::<f32>(row, i, |f| float(f.into())),
        Type::FLOAT8 => get::<f64>(row, i, float),
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => get::<String>(row, i, Value::from),
        Type::BOOL_ARRAY => list::<bool>(row, i, Value::from),
        Type::INT2_ARRAY => list::<i16>(row, i, Value::from),
        Type::INT4_ARRAY => list::<i32>(row, i, Value::from),
        Type::INT8_ARRAY => list::<i64>(row, i, Value::from),
        Type::FLOAT8_ARRAY => list::<f64>(row, i, float),
        Type::TEXT_ARRAY | Type::VARCHAR_ARRAY | Type::NAME_ARRAY | Type::BPCHAR_ARRAY => list::<String>(row, i, Value::from),
        _ => None,
    };
    found.or_else(|| get::<Raw>(row, i, |raw| json!(raw.0))).unwrap_or(Value::Null)
}

/// Any other type's binary value as `\x` and its bytes in hex (bytea's text form; others have no
/// decoder here).
struct Raw(String);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(format!("\\x{}", raw.iter().map(|b| format!("{b:02x}")).collect::<String>())))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}
