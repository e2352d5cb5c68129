'use strict'
// leakcheck's agent for node-postgres (npm "pg"): one client slot, one pg.Client per `connect`.
// Protocol: docs/agent-protocol.md (JSON lines: requests on stdin, one answer each on stdout).
const readline = require('node:readline')
const pg = require('pg')

const RELEASE = require('pg/package.json').version
const ARRAYS = new Set([1000, 1005, 1007, 1009, 1015, 1016, 1021, 1022]) // bool, int and text arrays
const text = (value) => value
// Milliseconds a cancel connection may stay open after its request was sent (as long as leakcheck's own
// CancelRequest waits, drivers/cancel.py): then the agent answers without `closed`.
const CANCEL_WAIT_MS = 5000

let client = null
let names = new Map() // SQL text -> the name this connection gave it: stmt_1, stmt_2... (as an app names them)
let notifications = []
let broken = null // an error the connection emitted between requests (e.g. the server closed it)

// Values: booleans and numbers as JSON, int8 exactly (its digits), arrays as arrays, the rest as text.
function parser(oid) {
  if (oid === 16) return (v) => v === 't'
  if (oid === 21 || oid === 23 || oid === 26) return Number
  if (oid === 700 || oid === 701) return (v) => (Number.isFinite(Number(v)) ? Number(v) : v)
  if (ARRAYS.has(oid)) return pg.types.getTypeParser(oid, 'text')
  return text
}
const types = { getTypeParser: parser }

function encode(value, oid) {
  if (value === null || value === undefined) return 'null'
  if (oid === 20 && /^-?\d+$/.test(value)) return value
  return JSON.stringify(value)
}

function rowsOf(result) {
  const last = Array.isArray(result) ? result[result.length - 1] : result
  const oids = last.fields.map((f) => f.dataTypeID)
  return last.rows.map((row) => '[' + row.map((v, i) => encode(v, oids[i])).join(',') + ']')
}

function failure(err) {
  const sqlstate = typeof err.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code) ? err.code : ''
  const closed = !sqlstate && /terminated|not queryable|ECONNRESET|EPIPE|closed/i.test(String(err.message))
  const message = String(err.message || err).split('\n')[0]
  return { sqlstate: sqlstate || (closed ? '08006' : ''), class: err.constructor.name, message }
}

async function run(config) {
  if (broken) throw broken
  return await client.query(config)
}

async function connect(req) {
  await close()
  const settings = req.settings || {}
  for (const name of Object.keys(settings)) {
    if (name !== 'options') {
      throw Object.assign(new Error(`node-postgres agent has no setting ${name}`), { usage: true })
    }
  }
  const c = new pg.Client({
    host: req.host, port: req.port, user: req.user, password: req.password, database: req.dbname,
    connectionTimeoutMillis: 10000, types, ...(settings.options ? { options: settings.options } : {}),
  })
  c.on('notification', (n) => notifications.push({ channel: n.channel, payload: n.payload || '' }))
  c.on('error', (err) => { broken = err })
  await c.connect()
  client = c
}

async function close() {
  const c = client
  client = null
  names = new Map()
  notifications = []
  broken = null
  if (c) await c.end().catch(() => {})
}

const ops = {
  hello: async () => ({
    protocol: 1, driver: 'node-postgres', release: RELEASE, runtime: `node ${process.versions.node}`, ops: ['cancel_key'],
  }),
  connect: async (req) => { await connect(req); return {} },
  // The harness way: an unnamed statement (no values: pg sends it with the simple query protocol).
  query: async (req) => ({ rows: rowsOf(await run({ text: req.sql, rowMode: 'array' })) }),
  execute: async (req) => { await run(req.sql); return {} },
  // The application way: a named query config; pg prepares it once per connection and reuses the name.
  prepared: async (req) => {
    if (!names.has(req.sql)) names.set(req.sql, `stmt_${names.size + 1}`)
    let result
    for (let i = 0; i < (req.times || 1); i++) {
      result = await run({ name: names.get(req.sql), text: req.sql, rowMode: 'array' })
    }
    return { rows: rowsOf(result) }
  },
  free: async () => { throw Object.assign(new Error('node-postgres has no API to free a named statement'), { unsupported: true }) },
  begin: async () => { await run('BEGIN'); return {} },
  commit: async () => { await run('COMMIT'); return {} },
  rollback: async () => { await run('ROLLBACK'); return {} },
  close: async () => { await close(); return {} },
  // The BackendKeyData pg keeps (what its cancel sends): through a pooler, the pooler's own key.
  cancel_key: async () => {
    if (!client) throw Object.assign(new Error('not connected'), { usage: true })
    return { pid: client.processID, secret_key: client.secretKey }
  },
}

function answer(id, body, err) {
  const out = { id, ok: !err }
  if (err) {
    const cls = err.usage ? 'usage' : err.unsupported ? 'unsupported' : null
    out.error = cls ? { sqlstate: '', class: cls, message: err.message } : failure(err)
  }
  if (client) out.notifications = notifications.splice(0)
  // pg's public API exposes no ParameterStatus values: `parameters` is omitted.
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
    // Read at once, whether or not a query runs: pg's own cancel path (what the undocumented
    // Client.prototype.cancel does): a new pg.Connection sends CancelRequest with this client's key.
    // Answered when the peer has closed that connection (it has read the request): `closed`.
    if (!client) return answer(req.id, null, Object.assign(new Error('not connected'), { usage: true }))
    const con = new pg.Connection()
    let sent = false
    let done = false
    let timer = null
    const reply = (err, closed) => {
      if (done) return
      done = true
      clearTimeout(timer)
      answer(req.id, err ? null : closed ? { closed: true } : {}, err)
    }
    // A peer that holds the connection open: answered after 5 s without `closed`, and the connection dropped.
    timer = setTimeout(() => { reply(null, false); con.stream.destroy() }, CANCEL_WAIT_MS)
    // A peer may reset the connection instead of closing it (Odyssey does): after the request was sent, an end.
    con.on('error', (err) => reply(sent && err.code === 'ECONNRESET' ? null : err, true))
    con.on('end', () => reply(sent ? null : new Error('the cancel connection ended before the request was sent'), true))
    con.on('connect', () => { con.cancel(client.processID, client.secretKey); sent = true })
    con.connect(client.port, client.host)
    return
  }
  if (req.op === 'exit') {
    queue = queue.then(close).then(() => { answer(req.id, {}); process.exit(0) })
    return
  }
  const op = ops[req.op]
  queue = queue.then(async () => {
    if (!op) return answer(req.id, null, Object.assign(new Error(`unknown op ${req.op}`), { usage: true }))
    if (req.op !== 'hello' && req.op !== 'connect' && req.op !== 'close' && !client) {
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
