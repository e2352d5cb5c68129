// leakcheck agent for pgx v4: one client slot, JSON lines on stdin/stdout (agent protocol 1).
//
// query = Query with QuerySimpleProtocol(true); execute = PgConn().Exec (the simple query
// protocol); prepared = Query in pgx's default mode, whose statement cache prepares named
// statements lrupsc_N_M; cancel = cancelling the running request's context, which is pgx v4's
// way (pgconn sends a cancel request and closes the connection); cancel_key = PgConn().PID() and
// SecretKey(), the BackendKeyData pgconn holds; copy_in = PgConn().CopyFrom with a reader of the rows;
// bind = PgConn().ExecPrepared. A close answer says "named": false where the agent's statement names
// are back where a fresh process's start (lruCount below).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname

	"github.com/jackc/pgconn"
	"github.com/jackc/pgproto3/v2"
	"github.com/jackc/pgtype"
	"github.com/jackc/pgx/v4"
)

// release is pgx's Debian package version, linked in at build time (-X main.release=...).
var release = "unknown"

// settings are the connection-string keys this agent passes to pgx.ParseConfig.
var settings = map[string]bool{"statement_cache_mode": true, "statement_cache_capacity": true,
	"prefer_simple_protocol": true, "options": true, "application_name": true}

// lruCount is pgconn's counter of the statement caches this process made (stmtcache.NewLRU takes the next
// number for each connection's cache, whose statements are lrupsc_<number>_<k>): the only state of pgx v4
// (pgx, pgconn, pgproto3, pgtype) a process carries from connection to connection that reaches the wire.
// With no connection left, no cache numbered from it is left either: the agent sets it back to a fresh
// process's 0 and says so ("named": false), so leakcheck gives it the next probe instead of starting another.
//
//go:linkname lruCount github.com/jackc/pgconn/stmtcache.lruCount
var lruCount uint64

type agent struct {
	conn     *pgx.Conn
	tx       pgx.Tx
	mu       sync.Mutex
	running  context.CancelFunc
	closings // of the connections it closed (protocol.go)
	// closeFailed: pgx reported a close of this agent's failed (its counter is then not known to be a fresh one's)
	closeFailed bool
}

func main() {
	serve(&agent{})
}

func (a *agent) cancel(id any) answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running != nil {
		a.running()
		return answer{"id": id, "ok": true}
	}
	if a.conn == nil {
		return a.failure(id, usage{"usage", "not connected: send connect first"})
	}
	// Nothing runs: pgconn's CancelRequest sends this connection's key all the same, and returns once it
	// read the peer's end of the cancel connection (io.EOF): closed. (A running query's context cancel
	// above has pgconn send it from a goroutine: not closed.)
	ctx, cancel := context.WithTimeout(context.Background(), cancelWait)
	defer cancel()
	if err := a.conn.PgConn().CancelRequest(ctx); err != nil {
		return a.failure(id, err)
	}
	return answer{"id": id, "ok": true, "closed": true}
}

func (a *agent) answer(r request) answer {
	ctx, cancel := context.WithCancel(context.Background())
	a.mu.Lock()
	a.running = cancel
	a.mu.Unlock()
	ans := answer{"id": r.ID, "ok": true}
	err := a.run(ctx, r, ans)
	a.mu.Lock()
	a.running = nil
	a.mu.Unlock()
	cancel()
	if err != nil {
		ans = a.failure(r.ID, err)
	}
	if a.conn != nil {
		a.drain(ans)
	}
	return ans
}

func (a *agent) run(ctx context.Context, r request, ans answer) error {
	switch r.Op {
	case "hello":
		ans["protocol"], ans["driver"], ans["release"], ans["runtime"] = 1, "pgx", release, "go "+strings.TrimPrefix(runtime.Version(), "go")
		// no `go` (protocol.go): pgconn v1's CopyFrom returns at the server's error, while its reader still
		// pauses in a goroutine of its own, so the pause never holds the call
		ans["ops"] = []string{"cancel_key", "bind", "copy_in"}
		ans["ends_within"] = (closeWait + cancelWait).Seconds()
		return nil
	case "connect":
		return a.connect(ctx, r)
	case "close":
		// "named": false once the close left no connection, not even one pgconn is still closing, and the
		// counter is a fresh process's; a close pgx reported failed says true (the agent serves no other probe)
		fresh := a.end() && !a.closeFailed && a.settled()
		if fresh {
			atomic.StoreUint64(&lruCount, 0)
		}
		ans["named"] = !fresh
		return nil
	case "exit":
		return nil
	}
	if a.conn == nil {
		return usage{"usage", "not connected: send connect first"}
	}
	var err error
	switch r.Op {
	case "query":
		ans["rows"], err = a.rows(a.conn.Query(ctx, r.SQL, pgx.QuerySimpleProtocol(true)))
	case "execute":
		_, err = a.conn.PgConn().Exec(ctx, r.SQL).ReadAll()
	case "prepared":
		for i := 0; i < r.Times || i == 0; i++ {
			if ans["rows"], err = a.rows(a.conn.Query(ctx, r.SQL)); err != nil {
				break
			}
		}
	case "cancel_key":
		// The BackendKeyData pgconn keeps (what its CancelRequest sends): through a pooler, the pooler's own.
		ans["pid"], ans["secret_key"] = a.conn.PgConn().PID(), a.conn.PgConn().SecretKey()
	case "copy_in":
		_, err = a.conn.PgConn().CopyFrom(ctx, copyChunks(r), r.SQL)
	case "free":
		err = usage{"unsupported", "pgx v4's statement cache drops no single statement (StatementCache offers only Clear)"}
	case "bind":
		// pgconn's ExecPrepared: Bind/Execute of a statement by name, with no Parse of its own.
		result := a.conn.PgConn().ExecPrepared(ctx, r.Name, nil, nil, nil).Read()
		if err = result.Err; err == nil {
			ans["rows"] = texts(result.Rows)
		}
	case "begin":
		a.tx, err = a.conn.Begin(ctx)
	case "commit", "rollback":
		if a.tx == nil {
			return usage{"usage", "no transaction begun through pgx"}
		}
		if r.Op == "commit" {
			err = a.tx.Commit(ctx)
		} else {
			err = a.tx.Rollback(ctx)
		}
		a.tx = nil
	default:
		err = usage{"usage", "unknown op " + r.Op}
	}
	return err
}

func (a *agent) connect(ctx context.Context, r request) error {
	a.end()
	dsn := fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s connect_timeout=10",
		quote(r.Host), r.Port, quote(r.User), quote(r.Password), quote(r.DBName))
	for name, value := range r.Settings {
		if !settings[name] {
			return usage{"usage", "unknown pgx setting " + name}
		}
		dsn += " " + name + "=" + quote(value)
	}
	config, err := pgx.ParseConfig(dsn)
	if err != nil {
		return usage{"usage", err.Error()}
	}
	a.conn, err = pgx.ConnectConfig(ctx, config)
	return err
}

// close is protocol.go's (the agent's end, stdin closed or `exit`).
func (a *agent) close() {
	a.end()
}

// end closes the connection, if any: false where pgx's close failed (kept in closeFailed: a close that failed
// before a reconnect makes the agent's later close say "named": true too).
func (a *agent) end() bool {
	if a.conn == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	err := a.conn.Close(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent: close:", err)
		a.closeFailed = true
	}
	a.keep(a.conn.PgConn().CleanupDone())
	a.conn, a.tx = nil, nil
	return err == nil
}

func (a *agent) rows(rows pgx.Rows, err error) ([][]any, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	all := [][]any{}
	for rows.Next() {
		row := []any{}
		for i, raw := range rows.RawValues() {
			row = append(row, value(a.conn.ConnInfo(), rows.FieldDescriptions()[i], raw))
		}
		all = append(all, row)
	}
	return all, rows.Err()
}

// value is a column as the protocol wants it: JSON null, bool, number, else PostgreSQL's text form.
func value(ci *pgtype.ConnInfo, field pgproto3.FieldDescription, raw []byte) any {
	if raw == nil {
		return nil
	}
	text := string(raw)
	if field.Format == pgtype.BinaryFormatCode {
		text = fmt.Sprintf("\\x%x", raw)
		if dt, ok := ci.DataTypeForOID(field.DataTypeOID); ok {
			v := pgtype.NewValue(dt.Value)
			decoder, canDecode := v.(pgtype.BinaryDecoder)
			encoder, canEncode := v.(pgtype.TextEncoder)
			if canDecode && canEncode && decoder.DecodeBinary(ci, raw) == nil {
				if buf, err := encoder.EncodeText(ci, nil); err == nil {
					text = string(buf)
				}
			}
		}
	}
	return scalar(field.DataTypeOID, text)
}

// drain adds the notifications pgx holds or has pending (a 2 ms wait) and the ParameterStatus values.
func (a *agent) drain(ans answer) {
	notes := []answer{}
	for !a.conn.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		note, err := a.conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			break
		}
		notes = append(notes, answer{"channel": note.Channel, "payload": note.Payload})
	}
	ans["notifications"] = notes
	parameters := answer{}
	for _, name := range reported {
		if value := a.conn.PgConn().ParameterStatus(name); value != "" {
			parameters[name] = value
		}
	}
	ans["parameters"] = parameters
}

func (a *agent) failure(id any, err error) answer {
	sqlstate, class := "", fmt.Sprintf("%T", err)
	var pgErr *pgconn.PgError
	var wrong usage
	switch {
	case errors.As(err, &pgErr):
		sqlstate, class = pgErr.Code, fmt.Sprintf("%T", pgErr)
	case errors.As(err, &wrong):
		class = wrong.class
	case a.conn != nil && a.conn.IsClosed():
		sqlstate = "08006"
	}
	message := strings.SplitN(err.Error(), "\n", 2)[0]
	return answer{"id": id, "ok": false, "error": answer{"sqlstate": sqlstate, "class": class, "message": message}}
}
