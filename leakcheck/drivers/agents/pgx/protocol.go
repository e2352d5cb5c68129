// What leakcheck's pgx agents share (v4 in pgx/, v5 in pgx-v5/: both build this file with their main.go):
// agent protocol 1's requests, answers and stdin loop, and a column's text form as the protocol wants it,
// whichever pgx decoded it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// reported are the ParameterStatus names PostgreSQL sends; pgconn answers one name at a time.
var reported = []string{"application_name", "client_encoding", "DateStyle", "default_transaction_read_only",
	"in_hot_standby", "integer_datetimes", "IntervalStyle", "is_superuser", "scram_iterations", "search_path",
	"server_encoding", "server_version", "session_authorization", "standard_conforming_strings", "TimeZone",
	"pgbouncer.version", "pgbouncer.pool_mode", "pgbouncer.max_prepared_statements"}

// cancelWait bounds the agent's CancelRequest, which returns once the peer closed the cancel connection: pgconn's
// own bound for the cancel it sends when a query's context ends (asyncClose, v4 and v5). Given up sooner, pgconn
// closes that connection while a pooler may still forward the request, and PgBouncer 1.18.0 then exits
// (pgbouncer#801): the agent's 5 s, on a loaded machine, did so (cancel_late on the session route).
const cancelWait = 15 * time.Second

// closeWait bounds an agent's close of its connection (pgx's Close sends a Terminate); with cancelWait, what its
// hello's ends_within says it may take to end after its input ended.
const closeWait = 10 * time.Second

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
// rest after the pause (until a `go`, or its bound), then the end.
type copySource struct {
	chunks [][]byte
	pause  time.Duration
	i      int
	paused bool
	gate   chan struct{} // closed by a `go`
}

// pausing is the gate of the copy_in now running, which a `go` (read by serve's stdin reader) closes; nil
// when none runs. went says whether the last copy_in's pause ended on it (its answer's "go").
var pausing = struct {
	sync.Mutex
	gate chan struct{}
	went bool
}{}

// goOn is a `go`: the pause of the copy_in now running ends (with none running, nothing happens).
func goOn(id any) answer {
	pausing.Lock()
	defer pausing.Unlock()
	if pausing.gate != nil {
		close(pausing.gate)
		pausing.gate = nil
	}
	return answer{"id": id, "ok": true}
}

func (c *copySource) Read(p []byte) (int, error) {
	if c.i >= len(c.chunks) {
		return 0, io.EOF
	}
	if c.i == 1 && !c.paused {
		timer := time.NewTimer(c.pause)
		select {
		case <-c.gate:
			pausing.Lock()
			pausing.went = true
			pausing.Unlock()
		case <-timer.C:
		}
		timer.Stop()
		pausing.Lock()
		pausing.gate = nil
		pausing.Unlock()
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

// copyChunks is a copy_in request's data: its first row, then `times` times the rest; its pause is the one a
// `go` ends from now on.
func copyChunks(r request) *copySource {
	chunks := [][]byte{[]byte(r.First)}
	for i := 0; i < r.Times; i++ {
		chunks = append(chunks, []byte(r.Rows))
	}
	gate := make(chan struct{})
	pausing.Lock()
	pausing.gate, pausing.went = gate, false
	pausing.Unlock()
	return &copySource{chunks: chunks, pause: time.Duration(r.PauseMS) * time.Millisecond, gate: gate}
}

type answer map[string]any

// usage is a request the caller got wrong (class "usage"), or one pgx cannot do ("unsupported").
type usage struct{ class, message string }

func (u usage) Error() string { return u.message }

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

// client is what serve asks of an agent: its answer to a request, its cancel (read while a request
// runs), its failure answer, its end, and its wait for the connections pgconn still closes (closings).
type client interface {
	answer(r request) answer
	cancel(id any) answer
	failure(id any, err error) answer
	close()
	settle(bound time.Duration)
}

// closings are pgconn's CleanupDone of the connections an agent closed. A connection pgconn gave up on (a
// cancelled context, a network error: asyncClose, pgconn v1 and v5) is closed at once to pgx, and Close on it
// returns at once, while a goroutine of pgconn's still sends its CancelRequest on a connection of its own, waits
// until the peer closes that (up to 15 s), and only then sends the Terminate and closes the socket.
type closings struct{ done []chan struct{} }

// keep adds a closed connection's CleanupDone, dropping those already done (a reused agent closes many).
func (c *closings) keep(done chan struct{}) {
	c.settled()
	c.done = append(c.done, done)
}

// settled says whether pgconn finished closing every connection the agent closed, without waiting.
func (c *closings) settled() bool {
	for len(c.done) > 0 {
		select {
		case <-c.done[0]:
			c.done = c.done[1:]
		default:
			return false
		}
	}
	return true
}

// settle waits, at most `bound`, until pgconn finished closing every connection the agent closed. An agent
// whose input ended does so before it exits: Go's exit would end pgconn's goroutine mid-cancel, both its
// sockets without a Terminate, and PgBouncer 1.18.0 frees a cancel client it still forwards a request for,
// which its next KILL (the pool's reset) disconnects again: it exits (pgbouncer#801, `bad client state: 0`).
func (c *closings) settle(bound time.Duration) {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for _, done := range c.done {
		select {
		case <-done:
		case <-timer.C:
			fmt.Fprintln(os.Stderr, "agent: a connection pgx closed was still closing after", bound)
			return
		}
	}
	c.done = nil
}

// serve reads requests from stdin: `cancel` and `go` are acted on at once, the others answered in order (a
// copy_in's answer says "go": true where its pause ended on a `go`).
func serve(a client) {
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
			} else if r.Op == "go" {
				send(goOn(r.ID))
			} else {
				requests <- r
			}
		}
		close(requests)
	}()
	for r := range requests {
		ans := a.answer(r)
		if r.Op == "copy_in" {
			pausing.Lock()
			if pausing.went {
				ans["go"] = true
			}
			pausing.gate, pausing.went = nil, false
			pausing.Unlock()
		}
		send(ans)
		if r.Op == "exit" {
			break
		}
	}
	a.close()
	a.settle(cancelWait) // (its hello's ends_within: the harness's stop gives it that long before a SIGTERM)
}

// quote is a connection-string value as pgx.ParseConfig reads it.
func quote(value string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(value) + "'"
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
	case 21, 23, 20: // int2, int4, int8
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return n
		}
	case 700, 701: // float4, float8
		if f, err := strconv.ParseFloat(text, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f
		}
	case 16: // bool
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
