//! What leakcheck's Rust agents share (sqlx/ and tokio-postgres/ build this file with their main.rs):
//! agent protocol 1's failures, answer lines and hello, and a float as the protocol wants it.

use serde_json::{json, Map, Value};

/// A failure as the protocol reports it: SQLSTATE, class, first line of the message.
pub struct Failure(pub String, pub String, pub String);

impl Failure {
    /// A request the agent refuses: class `usage` (the caller got it wrong) or `unsupported`.
    pub fn usage(class: &str, message: impl Into<String>) -> Self {
        Failure(String::new(), class.into(), message.into())
    }

    /// A driver's failure: its SQLSTATE ("" for none), its class, the first line of its message.
    pub fn driver(sqlstate: &str, class: &str, message: &str) -> Self {
        Failure(sqlstate.into(), class.into(), message.lines().next().unwrap_or_default().into())
    }
}

/// An answer's fields besides `id` and `ok`, or its failure.
pub type Answer = Result<Map<String, Value>, Failure>;

/// The answer line's object for request `id`.
pub fn reply(id: Value, answer: Answer) -> Map<String, Value> {
    let mut out = answer.unwrap_or_else(|Failure(sqlstate, class, message)| {
        let mut failed = Map::new();
        failed.insert("ok".into(), json!(false));
        failed.insert("error".into(), json!({"sqlstate": sqlstate, "class": class, "message": message}));
        failed
    });
    out.insert("id".into(), id);
    out.entry("ok").or_insert(json!(true));
    out
}

/// Writes one answer line (one locked write of a whole line, flushed at its newline).
pub fn send(out: Map<String, Value>) {
    println!("{}", Value::Object(out));
}

/// The hello's fields: `driver`, the release of `package` that Cargo.lock holds (what `cargo build
/// --locked` built) and the Rust the build was made with (AGENT_RUST_VERSION, set by leakcheck's build).
pub fn hello(driver: &str, package: &str) -> Map<String, Value> {
    let entry = format!("name = \"{package}\"\nversion = \"");
    let release = include_str!("Cargo.lock").split_once(&entry).and_then(|(_, rest)| rest.split('"').next());
    let mut answer = Map::new();
    answer.insert("protocol".into(), json!(1));
    answer.insert("driver".into(), json!(driver));
    answer.insert("release".into(), json!(release.unwrap_or("unknown")));
    answer.insert("runtime".into(), json!(format!("rust {}", option_env!("AGENT_RUST_VERSION").unwrap_or("unknown"))));
    answer
}

/// A float as JSON, NaN and the infinities as PostgreSQL's text for them.
pub fn float(f: f64) -> Value {
    match f {
        f if f.is_nan() => json!("NaN"),
        f if f.is_infinite() => json!(if f > 0.0 { "Infinity" } else { "-Infinity" }),
        f => json!(f),
    }
}
