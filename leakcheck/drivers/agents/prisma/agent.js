'use strict'
// leakcheck's agent for Prisma ORM 7 (npm "prisma", "@prisma/client", "@prisma/adapter-pg"): one client
// slot, one PrismaClient per `connect` over Prisma's driver adapter for node-postgres (pg), the only way
// Prisma 7 reaches PostgreSQL (its Rust query engine is gone). Protocol: docs/agent-protocol.md.
//
// The application's pg.Pool holds the slot's one connection. prepared = $queryRaw as a tagged template
// (named only by a statementNameGenerator: without one, Prisma has no prepared path, and `prepared` is
// `unsupported`); begin/commit/rollback = an interactive $transaction held open across requests, Prisma's
// own statements meanwhile through its transaction client. query/execute, the harness's own statements,
// run unnamed on that same connection, held by the agent between Prisma's calls: Prisma's raw path cannot
// return a void column (pg_advisory_lock) and pg's pool closes a connection after any failed statement
// (release(err)), so the errors the probes provoke on purpose would end the session they observe; a
// failure of Prisma's own calls still does, as in any Prisma application. The connection URL is the
// team's: `pgbouncer=true` and `options` are its parameters (Prisma 7 reads neither: pg takes `options`
// and ignores `pgbouncer`; nothing sends DEALLOCATE ALL any more).
const crypto = require('node:crypto')
const path = require('node:path')
const readline = require('node:readline')
const pg = require('pg')

// The protocol's stdout holds answers only: anything Prisma would print there goes to stderr.
console.log = console.error
const RELEASE = require(path.join(__dirname, 'node_modules', '@prisma', 'client', 'package.json')).version
const SETTINGS = { pgbouncer: 'false', options: '', statementNameGenerator: 'none' }
// An interactive transaction's bounds: Prisma's default timeout (5 s) ends one an application holds
// across requests; this agent holds it as long as leakcheck's own answer bound.
const TRANSACTION = { maxWait: 10000, timeout: 30000 }
const INT8 = new Set([20, 1016]) // int8 and int8[] (pg's oids): their digits, exactly
const ARRAYS = new Set([1000, 1005, 1007, 1009, 1015, 1016, 1021, 1022]) // bool, int and text arrays
const ROLLBACK = new Error('rollback requested')

let prisma = null // the connection's PrismaClient, made at the first call of Prisma's own
let generator = undefined // the connection's statementNameGenerator
let pool = null
let held = null // the pool's one client while the agent holds it (between Prisma's calls)
let acquired = null // the client the pool last handed out (to Prisma's interactive transaction, in `begin`)
let tx = null // { client, finish(commit), done }: the interactive transaction held open
let notifications = []
let last = null // the result set the adapter last handed Prisma: its rows in column order

const usage = (message) => Object.assign(new Error(message), { usage: true })
const unsupported = (message) => Object.assign(new Error(message), { unsupported: true })

// A team's statementNameGenerator (adapter-pg >= 7.6): the same name for the same SQL text, as pg's
// statement cache needs (it refuses a name given to another text).
const GENERATORS = {
  none: undefined,
  hash: (query) => `prisma_${crypto.createHash('sha256').update(query.sql).digest('hex').slice(0, 16)}`,
}

// Prisma turns raw rows into objects keyed by column name (two columns of one name become one): the rows
// are read in column order from the result set the adapter handed it.
function watched(queryable) {
  const queryRaw = queryable.queryRaw.bind(queryable)
  queryable.queryRaw = async (query) => (last = await queryRaw(query))
  return queryable
}

function adapter(options) {
  const { PrismaPg } = require('@prisma/adapter-pg')
  const factory = new PrismaPg(pool, options)
  const connect = factory.connect.bind(factory)
  factory.connect = async () => {
    const made = watched(await connect())
    const start = made.startTransaction.bind(made)
    made.startTransaction = async (level) => watched(await start(level))
    return made
  }
  return factory
}

// The harness's values, by pg's oid: booleans and numbers as JSON, arrays as arrays, the rest as text.
function parser(oid) {
  if (oid === 16) return (v) => v === 't'
  if (oid === 21 || oid === 23 || oid === 26) return Number
  if (oid === 700 || oid === 701) return (v) => (Number.isFinite(Number(v)) ? Number(v) : v)
  if (ARRAYS.has(oid)) return pg.types.getTypeParser(oid, 'text')
  return (v) => v
}
const types = { getTypeParser: parser }

function encode(value, int8) {
  if (value === null || value === undefined) return 'null'
  if (Array.isArray(value)) return '[' + value.map((v) => encode(v, int8)).join(',') + ']'
  if (int8 && /^-?\d+$/.test(String(value))) return String(value)
  if (typeof value === 'number' && !Number.isFinite(value)) return JSON.stringify(String(value))
  if (typeof value === 'boolean' || typeof value === 'number') return JSON.stringify(value)
  return JSON.stringify(String(value))
}

const line = (row, int8) => '[' + row.map((v, i) => encode(v, int8[i])).join(',') + ']'

// Prisma's error, with the server's SQLSTATE and words its adapter kept (meta.driverAdapterError.cause).
function failure(err) {
  const cause = (err.meta && err.meta.driverAdapterError && err.meta.driverAdapterError.cause) || err.cause || {}
  const code = [cause.originalCode, err.code].find((c) => typeof c === 'string' && /^[0-9A-Z]{5}$/.test(c) && !/^P\d{4}$/.test(c))
  const text = String(cause.originalMessage || err.message || err)
  const closed = !code && /terminated|not queryable|ECONNRESET|EPIPE|closed|ConnectionClosed/i.test(`${text} ${cause.kind || ''}`)
  const message = text.split('\n').map((l) => l.trim()).filter(Boolean).pop() || ''
  return { sqlstate: code || (closed ? '08006' : ''), class: err.constructor.name, message }
}

function url(req, settings) {
  const where = new URL('postgresql://host')
  where.username = encodeURIComponent(req.user)
  where.password = encodeURIComponent(req.password || '')
  where.pathname = '/' + encodeURIComponent(req.dbname)
  if (String(req.host).startsWith('/')) {
    where.hostname = 'localhost'
    where.searchParams.set('host', req.host) // a Unix socket's folder (a fleet's member)
  } else {
    where.hostname = req.host
  }
  where.port = String(req.port)
  if (settings.pgbouncer === 'true') where.searchParams.set('pgbouncer', 'true')
  if (settings.options) where.searchParams.set('options', settings.options)
  return where.toString()
}

async function connect(req) {
  await close()
  const settings = { ...SETTINGS }
  for (const [name, value] of Object.entries(req.settings || {})) {
    if (!(name in SETTINGS)) throw usage(`prisma agent has no setting ${name}`)
    settings[name] = String(value)
  }
  if (!(settings.statementNameGenerator in GENERATORS)) {
    throw usage(`statementNameGenerator is none or hash, not ${settings.statementNameGenerator}`)
  }
  // The application's own pool (PrismaPg takes one): one connection, never closed for being idle
  // (pg's default closes it after 10 s), opened now so a refused login is this request's answer.
  const p = new pg.Pool({ connectionString: url(req, settings), max: 1, idleTimeoutMillis: 0, connectionTimeoutMillis: 10000 })
  p.on('error', (err) => process.stderr.write(`pool: ${err.message}\n`))
  p.on('connect', (client) => {
    client.on('error', (err) => process.stderr.write(`connection: ${err.message}\n`)) // also while checked out
    client.on('notification', (n) => notifications.push({ channel: n.channel, payload: n.payload || '' }))
  })
  p.on('acquire', (client) => { acquired = client })
  try {
    held = await p.connect()
  } catch (err) {
    await p.end().catch(() => {})
    throw err
  }
  pool = p
  generator = GENERATORS[settings.statementNameGenerator]
}

// The application's PrismaClient, made at the first call that needs it (prepared, begin): making it sends
// nothing to the server, and an agent that only runs the harness's statements never loads Prisma's engine.
async function client() {
  if (!prisma) {
    const { PrismaClient } = require('@prisma/client')
    prisma = new PrismaClient({ adapter: adapter(generator ? { statementNameGenerator: generator } : {}) })
    await prisma.$connect()
  }
  return prisma
}

async function close() {
  const [c, p, t] = [prisma, pool, tx]
  prisma = null
  pool = null
  tx = null
  notifications = []
  if (t) await end(t, false).catch(() => {})
  letGo()
  if (c) await c.$disconnect().catch(() => {})
  if (p) await p.end().catch(() => {})
}

// The agent lets go of the connection for a call of Prisma's own, and takes it back after.
function letGo() {
  if (held) held.release()
  held = null
}

async function prismas(call) {
  if (tx) return await call(tx.client)
  const db = await client()
  letGo()
  try {
    return await call(db)
  } finally {
    held = await pool.connect()
  }
}

// The harness's statements: unnamed (no values: pg sends a simple query), on the slot's connection.
async function plain(sql) {
  const client = tx ? acquired : held
  if (!client) throw Object.assign(new Error('the connection was closed'), { code: '08006' })
  return await client.query({ text: sql, rowMode: 'array', types })
}

// $transaction(async (tx) => ...) driven step by step: its callback hands out the transaction client and
// returns when `commit` comes (Prisma commits), or throws when `rollback` comes (Prisma rolls back).
async function begin() {
  if (tx) throw usage('a transaction is already open')
  const db = await client()
  letGo()
  let opened, failed, finish
  const ready = new Promise((resolve, reject) => { opened = resolve; failed = reject })
  const finished = new Promise((resolve) => { finish = resolve })
  const done = db.$transaction(async (transaction) => {
    opened(transaction)
    if (!(await finished)) throw ROLLBACK
  }, TRANSACTION)
  done.catch(failed)
  try {
    tx = { client: await ready, finish, done }
  } catch (err) {
    held = await pool.connect()
    throw err
  }
}

async function end(t, commit) {
  t.finish(commit)
  try {
    await t.done
  } catch (err) {
    if (err !== ROLLBACK) throw err
  }
}

async function finish(commit) {
  if (!tx) throw usage('no transaction is open: send begin first')
  const t = tx
  tx = null
  try {
    await end(t, commit)
  } finally {
    held = await pool.connect()
  }
}

const ops = {
  hello: async () => ({
    protocol: 1, driver: 'prisma', release: RELEASE, runtime: `node ${process.versions.node}`,
    no_cancel: 'Prisma Client has no API to cancel a running query',
  }),
  connect: async (req) => { await connect(req); return {} },
  query: async (req) => {
    const result = await plain(req.sql)
    const last = Array.isArray(result) ? result[result.length - 1] : result
    const int8 = last.fields.map((f) => INT8.has(f.dataTypeID))
    return { rows: last.rows.map((row) => line(row, int8)) }
  },
  execute: async (req) => { await plain(req.sql); return {} },
  // The application way: $queryRaw`...` (the tagged template's own call), named by the statementNameGenerator.
  prepared: async (req) => {
    if (!generator) {
      throw unsupported('Prisma 7 names no statement unless the application gives @prisma/adapter-pg a statementNameGenerator '
        + '(statementNameGenerator=hash here): its $queryRaw runs unnamed, so no prepared statement exists to measure')
    }
    const strings = Object.assign([req.sql], { raw: [req.sql] })
    for (let i = 0; i < (req.times || 1); i++) {
      last = null
      await prismas((db) => db.$queryRaw(strings))
    }
    if (!last) return { rows: [] }
    const int8 = last.columnTypes.map((type) => type === 1 || type === 65) // Int64, Int64Array
    return { rows: last.rows.map((row) => line(row, int8)) }
  },
  free: async () => { throw unsupported('Prisma has no API to free a prepared statement') },
  begin: async () => { await begin(); return {} },
  commit: async () => { await finish(true); return {} },
  rollback: async () => { await finish(false); return {} },
  close: async () => { await close(); return {} },
}

function answer(id, body, err) {
  const out = { id, ok: !err }
  if (err) {
    const cls = err.usage ? 'usage' : err.unsupported ? 'unsupported' : null
    out.error = cls ? { sqlstate: '', class: cls, message: err.message } : failure(err)
  }
  if (pool) out.notifications = notifications.splice(0)
  // node-postgres (under Prisma) exposes no ParameterStatus values: `parameters` is omitted.
  const found = body && body.rows
  const fields = Object.entries(body || {}).filter(([k]) => k !== 'rows').map(([k, v]) => `,${JSON.stringify(k)}:${JSON.stringify(v)}`)
  const json = JSON.stringify(out).slice(0, -1) + fields.join('') + (found ? `,"rows":[${found.join(',')}]` : '') + '}'
  process.stdout.write(json + '\n')
}

let queue = Promise.resolve()
const lines = readline.createInterface({ input: process.stdin })
lines.on('line', (text) => {
  let req
  try {
    req = JSON.parse(text)
  } catch (err) {
    return answer(null, null, usage(`not JSON: ${text.slice(0, 80)}`))
  }
  if (req.op === 'cancel') return answer(req.id, null, unsupported('Prisma Client has no API to cancel a running query'))
  if (req.op === 'exit') {
    queue = queue.then(close).then(() => { answer(req.id, {}); process.exit(0) })
    return
  }
  const op = ops[req.op]
  queue = queue.then(async () => {
    if (!op) return answer(req.id, null, usage(`unknown op ${req.op}`))
    if (req.op !== 'hello' && req.op !== 'connect' && req.op !== 'close' && !pool) {
      return answer(req.id, null, usage('not connected'))
    }
    try {
      answer(req.id, await op(req))
    } catch (err) {
      answer(req.id, null, err)
    }
  })
})
lines.on('close', () => { queue.then(close).then(() => process.exit(0)) })
