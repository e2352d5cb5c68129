// leakcheck agent for pgx v5: one client slot, JSON lines on stdin/stdout (agent protocol 1).
//
// query = Query with QueryExecModeSimpleProtocol; execute = PgConn().Exec (the simple query
// protocol); prepared = Query in the connection's default_query_exec_mode (cache_statement by
// default: its statement cache prepares named statements stmtcache_<sha256 of the text>);
// cancel = PgConn().CancelRequest, sent from the stdin reader while the request before it runs
// (a cancelled context would only close the connection: pgx v5's default context watcher);
// cancel_key = PgConn().PID() and SecretKey(), the BackendKeyData pgconn holds.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// settings are the connection-string keys this agent passes to pgx.ParseConfig.
var settings = map[string]bool{"default_query_exec_mode": true, "statement_cache_capacity": true,
	"description_cache_capacity": true, "options": true, "application_name": true}

// release is the pgx module's version this program was built with (go.mod's require).
func release() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/jackc/pgx/v5" {
				return strings.TrimPrefix(dep.Version, "v")
			}
		}
	}
	return "unknown"
}

type agent struct {
	conn     *pgx.Conn
	tx       pgx.Tx
	mu       sync.Mutex // guards conn for the stdin reader's cancel
	closings            // of the connections it closed (protocol.go)
}

func main() {
	serve(&agent{})
}

// cancel sends the connection's CancelRequest, whether a request runs or not (pgconn reads the key it
// holds; the request's own goroutine keeps the connection). CancelRequest returns once it read the
// peer's end of the cancel connection, or when its context (cancelWait, protocol.go) ended first: closed only in the first case.
func (a *agent) cancel(id any) answer {
	a.mu.Lock()
	conn := a.conn
	a.mu.Unlock()
	if conn == nil {
		return a.failure(id, usage{"usage", "not connected: send connect first"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelWait)
	defer cancel()
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		return a.failure(id, err)
	}
	if ctx.Err() != nil {
		return answer{"id": id, "ok": true}
	}
	return answer{"id": id, "ok": true, "closed": true}
}

func (a *agent) answer(r request) answer {
	ans := answer{"id": r.ID, "ok": true}
	err := a.run(context.Background(), r, ans)
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
		ans["protocol"], ans["driver"], ans["release"], ans["runtime"] = 1, "pgx-v5", release(), "go "+strings.TrimPrefix(runtime.Version(), "go")
		ans["ops"] = []string{"cancel_key", "bind", "copy_in", "go"}
		ans["ends_within"] = (closeWait + cancelWait).Seconds()
		return nil
	case "connect":
		return a.connect(ctx, r)
	case "close":
		a.close()
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
		ans["rows"], err = a.rows(a.conn.Query(ctx, r.SQL, pgx.QueryExecModeSimpleProtocol))
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
		// Protocol 3.0 (pgx's default max_protocol_version) gives a 4-byte key; 3.2's are longer.
		key := a.conn.PgConn().SecretKey()
		if len(key) != 4 {
			return usage{"unsupported", fmt.Sprintf("the secret key is %d bytes (protocol 3.2), not a 32-bit integer", len(key))}
		}
		ans["pid"], ans["secret_key"] = a.conn.PgConn().PID(), int32(binary.BigEndian.Uint32(key))
	case "copy_in":
		_, err = a.conn.PgConn().CopyFrom(ctx, copyChunks(r), r.SQL)
	case "bind":
		// pgconn's ExecPrepared: Bind/Execute of a statement by name, with no Parse of its own.
		result := a.conn.PgConn().ExecPrepared(ctx, r.Name, nil, nil, nil).Read()
		if err = result.Err; err == nil {
			ans["rows"] = texts(result.Rows)
		}
	case "free":
		err = usage{"unsupported", "pgx v5's statement cache is internal: no API drops one statement (DeallocateAll drops every one)"}
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
	a.close()
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
	conn, err := pgx.ConnectConfig(ctx, config)
	a.mu.Lock()
	a.conn = conn
	a.mu.Unlock()
	return err
}

func (a *agent) close() {
	if a.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	if err := a.conn.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "agent: close:", err)
	}
	a.keep(a.conn.PgConn().CleanupDone())
	a.mu.Lock()
	a.conn, a.tx = nil, nil
	a.mu.Unlock()
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
			row = append(row, value(a.conn.TypeMap(), rows.FieldDescriptions()[i], raw))
		}
		all = append(all, row)
	}
	return all, rows.Err()
}

// value is a column as the protocol wants it: JSON null, bool, number, else PostgreSQL's text form
// (a binary value decoded by pgx's type map and encoded again as text).
func value(m *pgtype.Map, field pgconn.FieldDescription, raw []byte) any {
	if raw == nil {
		return nil
	}
	text := string(raw)
	if field.Format == pgtype.BinaryFormatCode {
		text = fmt.Sprintf("\\x%x", raw)
		if t, ok := m.TypeForOID(field.DataTypeOID); ok {
			if v, err := t.Codec.DecodeValue(m, field.DataTypeOID, pgtype.BinaryFormatCode, raw); err == nil {
				if buf, err := m.Encode(field.DataTypeOID, pgtype.TextFormatCode, v, nil); err == nil {
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
		// the server's own words: pgx v5 wraps a refused connect in every attempt's story (a TLS one first)
		sqlstate, class, err = pgErr.Code, fmt.Sprintf("%T", pgErr), pgErr
	case errors.As(err, &wrong):
		class = wrong.class
	case a.conn != nil && a.conn.IsClosed():
		sqlstate = "08006"
	}
	message := strings.SplitN(err.Error(), "\n", 2)[0]
	return answer{"id": id, "ok": false, "error": answer{"sqlstate": sqlstate, "class": class, "message": message}}
}
