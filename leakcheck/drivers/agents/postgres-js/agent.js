'use strict'
// leakcheck's agent for postgres.js (npm "postgres"): one client slot, one postgres() instance of one
// reserved connection per `connect`. Protocol: docs/agent-protocol.md (JSON lines on stdin/stdout).
const readline = require('node:readline')
const crypto = require('node:crypto')

// SCRAM's SaltedPassword kept per (password, salt, rounds, length, hash), as RFC 5802 5.1 lets a client keep it
// (the JVM agents do, Agent.java's KeptSaltedPasswords): postgres.js derives it with crypto.pbkdf2Sync at every
// login, ~1 ms of CPU for PostgreSQL's 4096 rounds. Each connect is still a full SCRAM login, its messages the
// same bytes (a new nonce, the proof computed from the same SaltedPassword); a new password or salt derives anew.
const pbkdf2Sync = crypto.pbkdf2Sync
const salted = new Map()
crypto.pbkdf2Sync = function keptPbkdf2Sync(password, salt, iterations, keylen, digest) {
  const key = JSON.stringify([Buffer.from(password).toString('base64'), Buffer.from(salt).toString('base64'),
    iterations, keylen, digest])
  let derived = salted.get(key)
  if (!derived) {
    derived = pbkdf2Sync(password, salt, iterations, keylen, digest)
    salted.set(key, Buffer.from(derived))
  }
  return Buffer.from(derived) // a copy: the caller may write into its own
}
const postgres = require('postgres') // (its `require('crypto')` is the same module object: it calls the kept one)

// (its package.json is not among the package's exports: read from the agent's own node_modules)
const RELEASE = require(require('node:path').join(__dirname, 'node_modules', 'postgres', 'package.json')).version
// Kept as PostgreSQL's text: postgres.js would make Dates, Buffers, objects or strings of these.
const AS_TEXT = [17, 20, 114, 1082, 1083, 1114, 1184, 1186, 1266, 1700, 3802]
const SETTINGS = { prepare: (v) => v === 'true' }

let sql = null // the postgres() instance (max: 1)
let conn = null // its reserved connection
let lost = null // { closed } of the instance: its connection was closed by the server or pooler
let notifications = []
let running = null // the query now running, for `cancel`
let pausing = null // the pause of the copy_in now running, for `go`: { went, resolve }

function encode(value, oid) {
  if (value === null || value === undefined) return 'null'
  if (oid === 20 && /^-?\d+$/.test(value)) return value // int8 exactly
  if (typeof value === 'number' && !Number.isFinite(value)) return JSON.stringify(String(value))
  return JSON.stringify(value)
}

function rowsOf(result) {
  const oids = (result.columns || []).map((c) => c.type)
  return Array.from(result, (row) => '[' + row.map((v, i) => encode(v, oids[i])).join(',') + ']')
}

function failure(err) {
  const code = typeof err.code === 'string' ? err.code : ''
  const sqlstate = /^[0-9A-Z]{5}$/.test(code) ? code : code.startsWith('CONNECTION_') ? '08006' : ''
  return { sqlstate, class: err.name || err.constructor.name, message: String(err.message || err).split('\n')[0] }
}

// postgres.js 3.4 writes a later query of a reserved connection to the socket it set to null when the
// server closed it (TypeError in nextWrite, which ends the process): answer as the closed connection it is.
function usable() {
  if (lost && lost.closed) {
    throw Object.assign(new Error('Connection closed by the server or pooler (postgres.js would write to its null socket)'),
      { code: 'CONNECTION_CLOSED' })
  }
  return conn
}

async function run(query) {
  running = query
  try {
    return await query
  } finally {
    running = null
  }
}

async function connect(req) {
  await close()
  const options = {}
  for (const [name, value] of Object.entries(req.settings || {})) {
    if (!(name in SETTINGS)) throw Object.assign(new Error(`postgres-js agent has no setting ${name}`), { usage: true })
    options[name] = SETTINGS[name](value)
  }
  const state = { closed: false }
  const s = postgres({
    host: req.host, port: req.port, user: req.user, password: req.password, database: req.dbname,
    max: 1, connect_timeout: 10, idle_timeout: 0, onnotice: () => {},
    onnotify: (channel, payload) => notifications.push({ channel, payload }),
    onclose: () => { state.closed = true },
    types: { leakcheck_text: { to: 25, from: AS_TEXT, serialize: String, parse: (x) => x } },
    ...options,
  })
  try {
    conn = await s.reserve()
  } catch (err) {
    await s.end({ timeout: 1 }).catch(() => {})
    throw err
  }
  sql = s
  lost = state
}

async function close() {
  const s = sql
  sql = null
  lost = null
  notifications = []
  if (conn) conn.release()
  conn = null
  if (s) await s.end({ timeout: 5 }).catch(() => {})
}

const ops = {
  hello: async () => ({ protocol: 1, driver: 'postgres-js', release: RELEASE, runtime: `node ${process.versions.node}`,
    ops: ['copy_in', 'go'] }),
  connect: async (req) => { await connect(req); return {} },
  // The harness way: unsafe() without values runs the simple query protocol, nothing prepared.
  query: async (req) => ({ rows: rowsOf(await run(usable().unsafe(req.sql).values())) }),
  execute: async (req) => { await run(usable().unsafe(req.sql)); return {} },
  // The application way: postgres.js prepares every query unless `prepare: false` (the connection's setting).
  prepared: async (req) => {
    let result
    for (let i = 0; i < (req.times || 1); i++) {
      result = await run(usable().unsafe(req.sql, [], { prepare: true, simple: false }).values())
    }
    return { rows: rowsOf(result) }
  },
  // COPY ... FROM STDIN through postgres.js's writable(): the first chunk, the rest after the pause (until a
  // `go`, or its bound), then end(). Its answer says "go": true where its pause ended on a `go`.
  copy_in: async (req) => {
    const pause = { went: false }
    try {
      const stream = await run(usable().unsafe(req.sql).writable())
      const done = new Promise((resolve, reject) => { stream.on('finish', resolve); stream.on('error', reject) })
      done.catch(() => {})
      stream.write(req.first)
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, req.pause_ms)
        pause.resolve = () => { clearTimeout(timer); pause.went = true; resolve() }
        pausing = pause
      })
      pausing = null
      for (let i = 0; i < req.times && !stream.destroyed; i++) stream.write(req.rows)
      if (!stream.destroyed) stream.end()
      await done
      return pause.went ? { go: true } : {}
    } catch (err) {
      if (pause.went) err.went = true
      throw err
    } finally {
      pausing = null
    }
  },
  free: async () => { throw Object.assign(new Error('postgres.js has no API to free a prepared statement'), { unsupported: true }) },
  begin: async () => { await run(usable().unsafe('BEGIN')); return {} },
  commit: async () => { await run(usable().unsafe('COMMIT')); return {} },
  rollback: async () => { await run(usable().unsafe('ROLLBACK')); return {} },
  close: async () => { await close(); return {} },
}

function answer(id, body, err) {
  const out = { id, ok: !err }
  if (err) {
    const cls = err.usage ? 'usage' : err.unsupported ? 'unsupported' : null
    out.error = cls ? { sqlstate: '', class: cls, message: err.message } : failure(err)
    if (err.went) out.go = true // a copy_in's pause ended on a `go`
  }
  if (sql) {
    out.notifications = notifications.splice(0)
    out.parameters = { ...sql.parameters }
  }
  const rows = body && body.rows
  const fields = Object.entries(body || {}).filter(([k]) => k !== 'rows').map(([k, v]) => `,${JSON.stringify(k)}:${JSON.stringify(v)}`)
  const json = JSON.stringify(out).slice(0, -1) + fields.join('') + (rows ? `,"rows":[${rows.join(',')}]` : '') + '}'
  process.stdout.write(json + '\n')
}

let queue = Promise.resolve()
const lines = readline.createInterface({ input: process.stdin })
lines.on('line', (line) => {
  let req
  try {
    req = JSON.parse(line)
  } catch (err) {
    return answer(null, null, Object.assign(new Error(`not JSON: ${line.slice(0, 80)}`), { usage: true }))
  }
  if (req.op === 'cancel') {
    if (!running) {
      return answer(req.id, null, Object.assign(new Error('postgres.js cancels a query object only while it runs: nothing runs now'), { unsupported: true }))
    }
    // postgres.js's own: a CancelRequest on a new connection. Its promise rejects when the peer resets
    // that connection (Odyssey does; PgBouncer closes it): a peer's way to end it, not the agent's end.
    Promise.resolve(running.cancel()).catch((err) => process.stderr.write(`cancel connection: ${err.message}\n`))
    return answer(req.id, {})
  }
  if (req.op === 'go') { // the copy_in now pausing goes on (none: nothing)
    if (pausing) pausing.resolve()
    return answer(req.id, {})
  }
  if (req.op === 'exit') {
    queue = queue.then(close).then(() => { answer(req.id, {}); process.exit(0) })
    return
  }
  const op = ops[req.op]
  queue = queue.then(async () => {
    if (!op) return answer(req.id, null, Object.assign(new Error(`unknown op ${req.op}`), { usage: true }))
    if (req.op !== 'hello' && req.op !== 'connect' && req.op !== 'close' && !sql) {
      return answer(req.id, null, Object.assign(new Error('not connected'), { usage: true }))
    }
    try {
      answer(req.id, await op(req))
    } catch (err) {
      answer(req.id, null, err)
    }
  })
})
lines.on('close', () => { queue.then(close).then(() => process.exit(0)) })
