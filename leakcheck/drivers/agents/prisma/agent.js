'use strict'
// leakcheck's agent for Prisma ORM 7 (npm "prisma", "@prisma/client", "@prisma/adapter-pg"): one client
// slot, one PrismaClient per `connect` over Prisma's driver adapter for node-postgres, the only way Prisma 7
// reaches PostgreSQL (its Rust query engine is gone). Protocol: docs/agent-protocol.md (JSON lines).
//
// query/execute = $queryRawUnsafe / $executeRawUnsafe, never named (the simple query protocol); prepared =
// $queryRaw as a tagged template; begin/commit/rollback = an interactive $transaction held open across
// requests, every statement meanwhile through its transaction client. The connection URL is the team's:
// `pgbouncer=true` and `options` are its parameters (Prisma 7 reads neither itself: pg takes `options`
// and ignores `pgbouncer`, and nothing sends DEALLOCATE ALL any more).
const crypto = require('node:crypto')
const path = require('node:path')
const readline = require('node:readline')
const pg = require('pg')
const { PrismaClient } = require('@prisma/client')
const { PrismaPg } = require('@prisma/adapter-pg')

// The protocol's stdout holds answers only: anything Prisma would print there goes to stderr.
console.log = console.error
const RELEASE = require(path.join(__dirname, 'node_modules', '@prisma', 'client', 'package.json')).version
const SETTINGS = { pgbouncer: 'false', options: '', statementNameGenerator: 'none' }
// An interactive transaction's bounds: Prisma's default timeout (5 s) ends one an application holds
// across requests; this agent holds it as long as leakcheck's own answer bound.
const TRANSACTION = { maxWait: 10000, timeout: 30000 }
const COLUMN = { Int64: 1, Float: 2, Double: 3, Int64Array: 65, FloatArray: 66, DoubleArray: 67 }
const ROLLBACK = new Error('rollback requested')

let prisma = null
let pool = null
let tx = null // { client, finish(commit), done }: the interactive transaction held open
let notifications = []
let last = null // the result set the adapter last handed Prisma: its rows in column order
let unnamed = false // the harness's statements: never named, whatever the generator
let named = false // the connection's statementNameGenerator names statements

const usage = (message) => Object.assign(new Error(message), { usage: true })
const unsupported = (message) => Object.assign(new Error(message), { unsupported: true })

// A team's statementNameGenerator (adapter-pg >= 7.6): the same name for the same SQL text, as pg's
// statement cache needs (it refuses a name given to another text).
const GENERATORS = {
  none: undefined,
  hash: (query) => (unnamed ? undefined : `prisma_${crypto.createHash('sha256').update(query.sql).digest('hex').slice(0, 16)}`),
}

// Prisma turns raw rows into objects keyed by column name (two columns of one name become one): the rows
// are read in column order from the result set the adapter handed it.
function watched(queryable) {
  const queryRaw = queryable.queryRaw.bind(queryable)
  queryable.queryRaw = async (query) => (last = await queryRaw(query))
  return queryable
}

function adapter(options) {
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

// Values: booleans and numbers as JSON, int8 exactly (its digits), arrays as arrays, the rest as text.
function encode(value, type) {
  if (value === null || value === undefined) return 'null'
  if (Array.isArray(value)) return '[' + value.map((v) => encode(v, type & ~64)).join(',') + ']'
  if (type === COLUMN.Int64 && /^-?\d+$/.test(String(value))) return String(value)
  if ((type === COLUMN.Float || type === COLUMN.Double) && typeof value === 'string') {
    return Number.isFinite(Number(value)) ? String(Number(value)) : JSON.stringify(value)
  }
  if (typeof value === 'number' && !Number.isFinite(value)) return JSON.stringify(String(value))
  if (typeof value === 'boolean' || typeof value === 'number') return JSON.stringify(value)
  if (value instanceof Uint8Array) return JSON.stringify('\\x' + Buffer.from(value).toString('hex'))
  return JSON.stringify(typeof value === 'object' ? JSON.stringify(value) : String(value))
}

async function rows(run) {
  last = null
  await run()
  if (!last) return []
  const types = last.columnTypes
  return last.rows.map((row) => '[' + row.map((v, i) => encode(v, types[i])).join(',') + ']')
}

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
  p.on('connect', (client) => client.on('notification', (n) => notifications.push({ channel: n.channel, payload: n.payload || '' })))
  try {
    (await p.connect()).release()
  } catch (err) {
    await p.end().catch(() => {})
    throw err
  }
  pool = p
  const generator = GENERATORS[settings.statementNameGenerator]
  named = Boolean(generator)
  prisma = new PrismaClient({ adapter: adapter(generator ? { statementNameGenerator: generator } : {}) })
  await prisma.$connect()
}

async function close() {
  const [c, p, t] = [prisma, pool, tx]
  prisma = null
  pool = null
  tx = null
  notifications = []
  if (t) await end(t, false).catch(() => {})
  if (c) await c.$disconnect().catch(() => {})
  if (p) await p.end().catch(() => {})
}

// Statements go through the interactive transaction's client while one is open, as in its callback.
const db = () => (tx ? tx.client : prisma)

async function harness(run) {
  unnamed = true
  try {
    return await run()
  } finally {
    unnamed = false
  }
}

// $transaction(async (tx) => ...) driven step by step: its callback hands out the transaction client and
// returns when `commit` comes (Prisma commits), or throws when `rollback` comes (Prisma rolls back).
async function begin() {
  if (tx) throw usage('a transaction is already open')
  let opened, failed, finish
  const ready = new Promise((resolve, reject) => { opened = resolve; failed = reject })
  const finished = new Promise((resolve) => { finish = resolve })
  const done = prisma.$transaction(async (client) => {
    opened(client)
    if (!(await finished)) throw ROLLBACK
  }, TRANSACTION)
  done.catch(failed)
  tx = { client: await ready, finish, done }
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
  await end(t, commit)
}

const ops = {
  hello: async () => ({
    protocol: 1, driver: 'prisma', release: RELEASE, runtime: `node ${process.versions.node}`,
    no_cancel: 'Prisma Client has no API to cancel a running query',
  }),
  connect: async (req) => { await connect(req); return {} },
  // The harness way: $queryRawUnsafe without values, unnamed (node-postgres then sends it as a simple query).
  query: async (req) => ({ rows: await harness(() => rows(() => db().$queryRawUnsafe(req.sql))) }),
  execute: async (req) => { await harness(() => db().$executeRawUnsafe(req.sql)); return {} },
  // The application way: $queryRaw`...` (the tagged template's own call); named only by a statementNameGenerator.
  prepared: async (req) => {
    if (!named) {
      throw unsupported('Prisma 7 names no statement unless the application gives @prisma/adapter-pg a statementNameGenerator '
        + '(statementNameGenerator=hash here): its $queryRaw runs unnamed, so no prepared statement exists to measure')
    }
    const strings = Object.assign([req.sql], { raw: [req.sql] })
    let result = []
    for (let i = 0; i < (req.times || 1); i++) result = await rows(() => db().$queryRaw(strings))
    return { rows: result }
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
  if (prisma) out.notifications = notifications.splice(0)
  // node-postgres (under Prisma) exposes no ParameterStatus values: `parameters` is omitted.
  const found = body && body.rows
  const fields = Object.entries(body || {}).filter(([k]) => k !== 'rows').map(([k, v]) => `,${JSON.stringify(k)}:${JSON.stringify(v)}`)
  const json = JSON.stringify(out).slice(0, -1) + fields.join('') + (found ? `,"rows":[${found.join(',')}]` : '') + '}'
  process.stdout.write(json + '\n')
}

let queue = Promise.resolve()
const lines = readline.createInterface({ input: process.stdin })
lines.on('line', (line) => {
  let req
  try {
    req = JSON.parse(line)
  } catch (err) {
    return answer(null, null, usage(`not JSON: ${line.slice(0, 80)}`))
  }
  if (req.op === 'cancel') return answer(req.id, null, unsupported('Prisma Client has no API to cancel a running query'))
  if (req.op === 'exit') {
    queue = queue.then(close).then(() => { answer(req.id, {}); process.exit(0) })
    return
  }
  const op = ops[req.op]
  queue = queue.then(async () => {
    if (!op) return answer(req.id, null, usage(`unknown op ${req.op}`))
    if (req.op !== 'hello' && req.op !== 'connect' && req.op !== 'close' && !prisma) {
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
