// leakcheck agent for pgx v4: one client slot, JSON lines on stdin/stdout (agent protocol 1).
//
// query = Query with QuerySimpleProtocol(true); execute = PgConn().Exec (the simple query
// protocol); prepared = Query in pgx's default mode, whose statement cache prepares named
// statements lrupsc_N_M; cancel = cancelling the running request's context, which is pgx v4's
// way (pgconn sends a cancel request and closes the connection); cancel_key = PgConn().PID() and
// SecretKey(), the BackendKeyData pgconn holds; copy_in = PgConn().CopyFrom with a reader of the rows.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

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

// reported are the ParameterStatus names PostgreSQL sends; pgconn answers one name at a time.
var reported = []string{"application_name", "client_encoding", "DateStyle", "default_transaction_read_only",
	"in_hot_standby", "integer_datetimes", "IntervalStyle", "is_superuser", "scram_iterations", "search_path",
	"server_encoding", "server_version", "session_authorization", "standard_conforming_strings", "TimeZone",
	"pgbouncer.version", "pgbouncer.pool_mode", "pgbouncer.max_prepared_statements"}

type request struct {
	ID       any               `json:"id"`
	Op       string            `json:"op"`
	SQL      string            `json:"sql"`
	Name     string            `json:"name"`
	Times    int               `json:"times"`
	Host     string            `json:"host"`
	Port     int               `json:"port"`
	User     string            `json:"user"`
	Password string            `json:"password"`
	DBName   string            `json:"dbname"`
	Settings map[string]string `json:"settings"`
	First    string            `json:"first"`
	Rows     string            `json:"rows"`
	PauseMS  int               `json:"pause_ms"`
}

type answer map[string]any

// usage is a request the caller got wrong (class "usage"), or one pgx cannot do ("unsupported").
type usage struct{ class, message string }

func (u usage) Error() string { return u.message }

type agent struct {
	conn    *pgx.Conn
	tx      pgx.Tx
	mu      sync.Mutex
	running context.CancelFunc
}

var out = struct {
	sync.Mutex
	*json.Encoder
}{Encoder: json.NewEncoder(os.Stdout)}

func send(a answer) {
	out.Lock()
	defer out.Unlock()
	if err := out.Encode(a); err != nil {
		fmt.Fprintln(os.Stderr, "agent: stdout:", err)
	}
}

func main() {
	a := &agent{}
	requests := make(chan request)
	go func() {
		lines := bufio.NewScanner(os.Stdin)
		lines.Buffer(make([]byte, 1<<20), 64<<20)
		for lines.Scan() {
			if strings.TrimSpace(lines.Text()) == "" {
				continue
			}
			var r request
			if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
				var id struct{ ID any }
				_ = json.Unmarshal(lines.Bytes(), &id) // the id, when the line has one
				send(a.failure(id.ID, usage{"usage", "bad request line: " + err.Error()}))
			} else if r.Op == "cancel" {
				send(a.cancel(r.ID))
			} else {
				requests <- r
			}
		}
		close(requests)
	}()
	for r := range requests {
		send(a.answer(r))
		if r.Op == "exit" {
			break
		}
	}
	a.close()
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
		ans["ops"] = []string{"cancel_key", "bind", "copy_in"}
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
		chunks := [][]byte{[]byte(r.First)}
		for i := 0; i < r.Times; i++ {
			chunks = append(chunks, []byte(r.Rows))
		}
		_, err = a.conn.PgConn().CopyFrom(ctx, &copySource{chunks: chunks, pause: time.Duration(r.PauseMS) * time.Millisecond}, r.SQL)
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

// texts are rows of text-format values (ExecPrepared's default), each a string or null.
func texts(rows [][][]byte) [][]any {
	all := [][]any{}
	for _, raw := range rows {
		row := []any{}
		for _, v := range raw {
			if v == nil {
				row = append(row, nil)
			} else {
				row = append(row, string(v))
			}
		}
		all = append(all, row)
	}
	return all
}

// copySource is what CopyFrom reads: its first chunk at once (pgconn writes each read as one CopyData), the
// rest after the pause, then the end.
type copySource struct {
	chunks [][]byte
	pause  time.Duration
	i      int
	paused bool
}

func (c *copySource) Read(p []byte) (int, error) {
	if c.i >= len(c.chunks) {
		return 0, io.EOF
	}
	if c.i == 1 && !c.paused {
		time.Sleep(c.pause)
		c.paused = true
	}
	n := copy(p, c.chunks[c.i])
	if n < len(c.chunks[c.i]) {
		c.chunks[c.i] = c.chunks[c.i][n:]
	} else {
		c.i++
	}
	return n, nil
}

func quote(value string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(value) + "'"
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
	a.conn, err = pgx.ConnectConfig(ctx, config)
	return err
}

func (a *agent) close() {
	if a.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.conn.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "agent: close:", err)
	}
	a.conn, a.tx = nil, nil
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

// arrays maps an array type's oid to its element type's (bool, int2, int4, int8, float4, float8,
// text, name, varchar, bpchar).
var arrays = map[uint32]uint32{1000: 16, 1005: 21, 1007: 23, 1016: 20, 1021: 700, 1022: 701, 1009: 25,
	1003: 19, 1015: 1043, 1014: 1042}

// scalar is a value's text form as the protocol wants it, for its type.
func scalar(oid uint32, text string) any {
	if element, ok := arrays[oid]; ok {
		i := strings.IndexByte(text, '{') // skips a dimension decoration, [1:2]={...}
		if i < 0 {
			return text
		}
		return elements(text, &i, element)
	}
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return n
		}
	case pgtype.Float4OID, pgtype.Float8OID:
		if f, err := strconv.ParseFloat(text, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f
		}
	case pgtype.BoolOID:
		return text == "t"
	}
	return text
}

// elements parses one level of an array's text form ({1,"a b",NULL,{2}}) from text[*i] on.
func elements(text string, i *int, oid uint32) []any {
	out := []any{}
	for *i++; *i < len(text) && text[*i] != '}'; {
		switch c := text[*i]; {
		case c == ',':
			*i++
		case c == '{':
			out = append(out, elements(text, i, oid))
		case c == '"':
			var b strings.Builder
			for *i++; *i < len(text) && text[*i] != '"'; *i++ {
				if text[*i] == '\\' {
					*i++
				}
				b.WriteByte(text[*i])
			}
			*i++
			out = append(out, scalar(oid, b.String()))
		default:
			end := strings.IndexAny(text[*i:], ",}")
			if end < 0 {
				end = len(text) - *i
			}
			if word := text[*i : *i+end]; word == "NULL" {
				out = append(out, nil)
			} else {
				out = append(out, scalar(oid, word))
			}
			*i += end
		}
	}
	*i++
	return out
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
