// leakcheck agent for pgjdbc: one client slot, JSON lines on stdin/stdout (docs: agent protocol 1).
//
// query = a plain Statement with its prepareThreshold at 0; prepared = one cached PreparedStatement per SQL text (pgjdbc names it
// S_n on the server from its prepareThreshold-th execution); cancel = Statement.cancel() from the
// stdin reader thread while the worker runs the request before it; copy_in = the CopyManager's CopyIn (its
// pause ends on a `go`, read by that thread too). Its
// argument, when given, is the driver id its hello says: `pgjdbc-maven` runs this file with Maven Central's
// jar, `pgjdbc` with Debian's. `--load-and-exit` is the build's class-data archive run (loadJarOf).

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.security.InvalidKeyException;
import java.security.NoSuchAlgorithmException;
import java.security.Provider;
import java.security.Security;
import java.security.spec.InvalidKeySpecException;
import java.security.spec.KeySpec;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

import javax.crypto.SecretKey;
import javax.crypto.SecretKeyFactory;
import javax.crypto.SecretKeyFactorySpi;
import javax.crypto.spec.PBEKeySpec;

import org.postgresql.PGConnection;
import org.postgresql.PGNotification;
import org.postgresql.PGProperty;
import org.postgresql.PGStatement;
import org.postgresql.copy.CopyIn;

public final class Agent {
    /** The protocol's stdout (a library's System.out may be sent elsewhere: the hibernate agent's is stderr). */
    private static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    private static final Map<String, Object> END = new HashMap<>();
    private static String driver = "pgjdbc";

    private volatile Connection conn;
    /** pgjdbc's cancelSignalTimeout for this connection: a cancel that waited this long for the peer's end timed out. */
    private volatile long cancelSignalTimeoutMs = 10_000L;
    private final Map<String, PreparedStatement> prepared = new HashMap<>();
    private volatile Statement running;
    /** The pause of the copy_in now running, which a `go` (read by the stdin reader thread) ends; null when none runs. */
    private static volatile CountDownLatch pausing;
    /** Whether the last copy_in's pause ended on a `go` (its answer's "go"). */
    private boolean went;

    /** A request the caller got wrong (class "usage"). */
    static final class Usage extends Exception {
        Usage(String message) { super(message); }
    }

    /**
     * SCRAM's SaltedPassword (PBKDF2 with HMAC-SHA-256: 4096 rounds by default), kept per password, salt, rounds
     * and length, as RFC 5802 (section 5.1) lets a client keep it for the next login to the same server, which
     * offers the same salt: each login still runs SCRAM in full, its messages the same bytes. pgjdbc derives it
     * afresh at every login through this JCE algorithm; the agents' JVMs compile with C1 only (their start is most
     * of their cost), which has no SHA-256 intrinsic: ~13 ms of CPU a login where an application's C2 takes ~1 ms.
     */
    static final class KeptSaltedPasswords extends Provider {
        private static final String ALGORITHM = "PBKDF2WithHmacSHA256";
        private static final Map<List<Object>, byte[]> KEPT = new ConcurrentHashMap<>();

        KeptSaltedPasswords() {
            super("leakcheck-scram", "1", ALGORITHM + " kept per (password, salt, rounds, length)");
            putService(new Service(this, "SecretKeyFactory", ALGORITHM, KeptSaltedPasswords.class.getName(), null, null) {
                @Override
                public Object newInstance(Object parameter) {
                    return new Factory();
                }
            });
        }

        private static final class Factory extends SecretKeyFactorySpi {
            @Override
            protected SecretKey engineGenerateSecret(KeySpec spec) throws InvalidKeySpecException {
                if (!(spec instanceof PBEKeySpec)) throw new InvalidKeySpecException("not a PBEKeySpec");
                PBEKeySpec pbe = (PBEKeySpec) spec;
                List<Object> key = List.of(new String(pbe.getPassword()), java.util.HexFormat.of().formatHex(pbe.getSalt()),
                        pbe.getIterationCount(), pbe.getKeyLength());
                byte[] derived = KEPT.get(key);
                if (derived == null) {
                    derived = sunJce().generateSecret(spec).getEncoded();
                    KEPT.put(key, derived);
                }
                return new javax.crypto.spec.SecretKeySpec(derived, ALGORITHM);
            }

            @Override
            protected KeySpec engineGetKeySpec(SecretKey key, Class<?> spec) throws InvalidKeySpecException {
                return sunJce().getKeySpec(key, spec);
            }

            @Override
            protected SecretKey engineTranslateKey(SecretKey key) throws InvalidKeyException {
                return sunJce().translateKey(key);
            }

            private static SecretKeyFactory sunJce() {
                try {
                    return SecretKeyFactory.getInstance(ALGORITHM, "SunJCE");
                } catch (NoSuchAlgorithmException | java.security.NoSuchProviderException e) {
                    throw new IllegalStateException(e);
                }
            }
        }
    }

    /** Puts KeptSaltedPasswords ahead of SunJCE's PBKDF2 (the pgjdbc, pgjdbc-maven and hibernate agents). */
    static void keepSaltedPasswords() {
        Security.insertProviderAt(new KeptSaltedPasswords(), 1);
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--load-and-exit")) {
            loadJarOf(org.postgresql.Driver.class);
            try {
                loadConnectPath();
            } catch (Exception e) { // the archive only misses those classes: the build goes on without them
                System.err.println("agent: the archive run's connect path: " + e);
            }
            System.exit(0);
        }
        if (args.length > 0) driver = args[0];
        keepSaltedPasswords();
        Agent agent = new Agent();
        serve(agent::answer, agent::cancel);
        agent.close();
        System.exit(0);
    }

    /**
     * Loads, without initializing them, the classes of the jar that holds `anchor` (the build's class-data archive
     * run, -XX:ArchiveClassesAtExit, archives them: an agent maps them at its start instead of reading and verifying
     * them at its first connect). Nothing runs: a class whose dependencies are not there is skipped.
     */
    static void loadJarOf(Class<?> anchor) throws IOException, URISyntaxException {
        ClassLoader loader = anchor.getClassLoader();
        try (JarFile jar = new JarFile(new java.io.File(anchor.getProtectionDomain().getCodeSource().getLocation().toURI()))) {
            for (Enumeration<JarEntry> e = jar.entries(); e.hasMoreElements(); ) {
                String name = e.nextElement().getName();
                if (!name.endsWith(".class") || name.contains("-")) continue; // module-info, package-info, META-INF/versions
                try {
                    Class.forName(name.substring(0, name.length() - 6).replace('/', '.'), false, loader);
                } catch (LinkageError | ClassNotFoundException skipped) { // an optional dependency's
                }
            }
        }
    }

    /**
     * What an agent's start and first connect load from the JDK, for the build's class-data archive run (which
     * archives every class a run loads; without it a start read ~570 classes from the JDK's modules): the request
     * loop's queue and JSON, SCRAM's crypto (PBKDF2 through KeptSaltedPasswords, HMAC-SHA-256, SHA-256, the nonce's
     * SecureRandom, Base64, SASLprep's Normalizer) and this agent's connect, to a loopback port of this run's own
     * that closes each connection it accepts (no server: the connect fails). An agent's life never runs this.
     */
    static void loadConnectPath() throws Exception {
        keepSaltedPasswords();
        LinkedBlockingQueue<Map<String, Object>> queue = new LinkedBlockingQueue<>();
        queue.add(END);
        queue.take();
        Json.write(Json.object("{\"id\": 1, \"op\": \"hello\", \"a\": [1, 2.5, true, null, \"\\u00e9\"]}"));
        SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(new PBEKeySpec(new char[] {'x'}, new byte[16], 2, 256));
        javax.crypto.Mac hmac = javax.crypto.Mac.getInstance("HmacSHA256");
        hmac.init(new javax.crypto.spec.SecretKeySpec(new byte[32], "HmacSHA256"));
        java.util.Base64.getEncoder().encodeToString(hmac.doFinal(java.security.MessageDigest.getInstance("SHA-256").digest(new byte[1])));
        new java.security.SecureRandom().nextBytes(new byte[18]);
        java.text.Normalizer.normalize("x", java.text.Normalizer.Form.NFKC);
        java.net.InetAddress loopback = java.net.InetAddress.getByName("127.0.0.1"); // the one the connect names
        try (java.net.ServerSocket listener = new java.net.ServerSocket(0, 8, loopback)) {
            Thread closer = new Thread(() -> {
                while (true) {
                    try (java.net.Socket refused = listener.accept()) { // closed at once: the connect fails
                    } catch (IOException e) {
                        return; // the listener is closed
                    }
                }
            }, "closer");
            closer.setDaemon(true);
            closer.start();
            Agent agent = new Agent();
            try {
                agent.connect(Json.object("{\"host\": \"127.0.0.1\", \"port\": " + listener.getLocalPort()
                        + ", \"user\": \"x\", \"password\": \"x\", \"dbname\": \"x\", \"settings\": {\"prepareThreshold\": \"5\"}}"));
            } catch (SQLException expected) {
            }
        }
    }

    /**
     * Answers requests until `exit` or the end of stdin: `cancel` at once from the stdin reader thread,
     * everything else in order on the calling thread, the worker (shared with hibernate/HibernateAgent.java).
     */
    static void serve(Function<Map<String, Object>, Map<String, Object>> answer,
                      Function<Object, Map<String, Object>> cancel) throws InterruptedException {
        LinkedBlockingQueue<Map<String, Object>> queue = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> read(queue, cancel), "stdin");
        reader.setDaemon(true);
        reader.start();
        while (true) {
            Map<String, Object> request = queue.take();
            if (request == END) return;
            send(answer.apply(request));
            if ("exit".equals(request.get("op"))) return;
        }
    }

    /** The stdin reader: acts on `cancel` and `go` at once, queues everything else for the worker. */
    private static void read(LinkedBlockingQueue<Map<String, Object>> queue, Function<Object, Map<String, Object>> cancel) {
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) continue;
                Map<String, Object> request;
                try {
                    request = Json.object(line);
                } catch (IllegalArgumentException e) {
                    send(failure(null, "", "usage", "bad request line: " + e.getMessage()));
                    continue;
                }
                if ("cancel".equals(request.get("op"))) {
                    send(cancel.apply(request.get("id")));
                } else if ("go".equals(request.get("op"))) { // the copy_in now pausing goes on (none: nothing)
                    CountDownLatch latch = pausing;
                    if (latch != null) latch.countDown();
                    send(success(request.get("id")));
                } else {
                    queue.add(request);
                }
            }
        } catch (Exception e) {
            System.err.println("agent: stdin: " + e);
        }
        queue.add(END);
    }

    private Map<String, Object> cancel(Object id) {
        Statement statement = running;
        Connection connection = conn;
        try {
            if (statement != null) {
                // Sends nothing when pgjdbc does not see the statement in its query yet: not `closed`.
                statement.cancel();
            } else if (connection != null) {
                // Nothing runs: Statement.cancel would do nothing; PGConnection.cancelQuery sends the key all the same,
                // and returns once it read the peer's end of the cancel connection (receiveEOF): `closed`. It also
                // returns, silently, when its cancelSignalTimeout passed first: then not `closed`.
                long started = System.nanoTime();
                connection.unwrap(PGConnection.class).cancelQuery();
                long tookMs = (System.nanoTime() - started) / 1_000_000L;
                Map<String, Object> answer = success(id);
                if (cancelSignalTimeoutMs <= 0 || tookMs < cancelSignalTimeoutMs) answer.put("closed", true);
                return answer;
            } else {
                return failure(id, "", "usage", "not connected: send connect first");
            }
            return success(id);
        } catch (SQLException e) {
            return failure(id, e.getSQLState(), e.getClass().getName(), e.getMessage());
        }
    }

    private Map<String, Object> answer(Map<String, Object> request) {
        Object id = request.get("id");
        String op = String.valueOf(request.get("op"));
        Map<String, Object> answer;
        went = false;
        try {
            answer = success(id);
            run(op, request, answer);
        } catch (SQLException e) {
            if (e.getCause() != null) e.printStackTrace(); // the driver's own fault, for the agent's log
            String state = e.getSQLState() == null ? "" : e.getSQLState();
            answer = failure(id, state, e.getClass().getName(), e.getMessage());
        } catch (Usage e) {
            answer = failure(id, "", "usage", e.getMessage());
        } catch (RuntimeException e) { // a request of the wrong shape, or a driver fault
            answer = failure(id, "", e.getClass().getName(), String.valueOf(e.getMessage()));
        }
        if ("copy_in".equals(op) && went) answer.put("go", true);
        if (conn != null) drain(answer);
        return answer;
    }

    private void run(String op, Map<String, Object> request, Map<String, Object> answer)
            throws SQLException, Usage {
        switch (op) {
            case "hello":
                String release = org.postgresql.Driver.class.getPackage().getImplementationVersion();
                answer.put("protocol", 1);
                answer.put("driver", driver);
                answer.put("release", release != null ? release : org.postgresql.util.DriverInfo.DRIVER_VERSION);
                answer.put("runtime", "java " + System.getProperty("java.version"));
                answer.put("ops", List.of("copy_in", "go"));
                return;
            case "connect":
                connect(request);
                return;
            case "close":
                close();
                return;
            case "exit":
                return;
            default:
        }
        if (conn == null) throw new Usage("not connected: send connect first");
        String sql = request.get("sql") instanceof String ? (String) request.get("sql") : "";
        switch (op) {
            case "query":
                try (Statement statement = harness()) {
                    answer.put("rows", execute(statement, () -> statement.execute(sql)));
                }
                return;
            case "execute":
                try (Statement statement = harness()) {
                    execute(statement, () -> statement.execute(sql));
                }
                return;
            case "prepared": {
                PreparedStatement statement = prepared.get(sql);
                if (statement == null) {
                    statement = conn.prepareStatement(sql);
                    prepared.put(sql, statement);
                }
                int times = request.get("times") == null ? 1 : ((Number) request.get("times")).intValue();
                Object rows = null;
                for (int i = 0; i < times; i++) rows = execute(statement, statement::execute);
                answer.put("rows", rows);
                return;
            }
            case "free": {
                PreparedStatement statement = prepared.remove(sql);
                if (statement != null) statement.close();
                return;
            }
            case "copy_in":
                copyIn(sql, request);
                return;
            case "begin":
                conn.setAutoCommit(false);
                return;
            case "commit":
                conn.commit();
                conn.setAutoCommit(true);
                return;
            case "rollback":
                conn.rollback();
                conn.setAutoCommit(true);
                return;
            default:
                throw new Usage("unknown op " + op);
        }
    }

    /** COPY ... FROM STDIN: the first chunk flushed at once, the rest after the pause (until a `go`, or its
     *  bound), then the copy's end; on an error the copy is cancelled (CopyFail), as CopyManager.copyIn(sql,
     *  stream) does. */
    private void copyIn(String sql, Map<String, Object> request) throws SQLException, Usage {
        CountDownLatch latch = new CountDownLatch(1);
        pausing = latch; // a `go` from now on ends this copy's pause
        CopyIn copy = null;
        try {
            copy = conn.unwrap(PGConnection.class).getCopyAPI().copyIn(sql);
            byte[] first = text(request, "first").getBytes(StandardCharsets.UTF_8);
            copy.writeToCopy(first, 0, first.length);
            copy.flushCopy();
            went = latch.await(((Number) request.get("pause_ms")).longValue(), TimeUnit.MILLISECONDS);
            pausing = null;
            byte[] rows = text(request, "rows").getBytes(StandardCharsets.UTF_8);
            int times = ((Number) request.get("times")).intValue();
            for (int i = 0; i < times; i++) copy.writeToCopy(rows, 0, rows.length);
            copy.endCopy();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SQLException("interrupted during COPY");
        } finally {
            pausing = null;
            if (copy != null && copy.isActive()) {
                try {
                    copy.cancelCopy();
                } catch (SQLException ignored) { // the copy's own error is what the caller gets
                }
            }
        }
    }

    private void connect(Map<String, Object> request) throws SQLException, Usage {
        close();
        Properties props = new Properties();
        props.setProperty("user", text(request, "user"));
        props.setProperty("password", request.get("password") == null ? "" : text(request, "password"));
        props.setProperty("connectTimeout", "10");
        props.setProperty("loginTimeout", "10");
        Object settings = request.get("settings");
        if (settings instanceof Map) {
            for (Map.Entry<?, ?> e : ((Map<?, ?>) settings).entrySet()) {
                String name = String.valueOf(e.getKey());
                if (PGProperty.forName(name) == null) throw new Usage("unknown pgjdbc setting " + name);
                props.setProperty(name, String.valueOf(e.getValue()));
            }
        }
        String host = text(request, "host");
        if (host.startsWith("/")) {
            // pgjdbc has no Unix sockets of its own: junixsocket's factory (libjunixsocket-java) connects to
            // the server's socket file in that folder, as libpq would; the URL's host is then only a name.
            props.setProperty("socketFactory", "org.newsclub.net.unix.AFUNIXSocketFactory$FactoryArg");
            props.setProperty("socketFactoryArg", host + "/.s.PGSQL." + request.get("port"));
            host = "localhost";
        }
        String url = "jdbc:postgresql://" + host + ":" + request.get("port") + "/" + text(request, "dbname");
        cancelSignalTimeoutMs = 1000L * PGProperty.CANCEL_SIGNAL_TIMEOUT.getInt(props);
        conn = DriverManager.getConnection(url, props);
    }

    /** A plain Statement that never names a server statement (pgjdbc would from the prepareThreshold-th run of a text). */
    private Statement harness() throws SQLException {
        Statement statement = conn.createStatement();
        statement.unwrap(PGStatement.class).setPrepareThreshold(0);
        return statement;
    }

    private void close() {
        prepared.clear();
        if (conn == null) return;
        try {
            conn.close();
        } catch (SQLException e) {
            System.err.println("agent: close: " + e);
        }
        conn = null;
    }

    interface Execution { boolean run() throws SQLException; }

    /** Runs one execution as the statement `cancel` may reach; the rows of its first result, or null. */
    private List<Object> execute(Statement statement, Execution execution) throws SQLException {
        running = statement;
        try {
            if (!execution.run()) return null;
            try (ResultSet rs = statement.getResultSet()) {
                return rows(rs);
            }
        } finally {
            running = null;
        }
    }

    static List<Object> rows(ResultSet rs) throws SQLException {
        ResultSetMetaData meta = rs.getMetaData();
        List<Object> rows = new ArrayList<>();
        while (rs.next()) {
            List<Object> row = new ArrayList<>();
            for (int i = 1; i <= meta.getColumnCount(); i++) row.add(value(rs, i, meta.getColumnType(i)));
            rows.add(row);
        }
        return rows;
    }

    /** An array's elements (nested arrays for more dimensions): numbers, booleans and null as JSON, the rest as text. */
    static List<Object> elements(Object array) {
        List<Object> out = new ArrayList<>();
        for (Object element : (Object[]) array) {
            if (element instanceof Object[]) out.add(elements(element));
            else if (element instanceof Short || element instanceof Integer || element instanceof Long) out.add(((Number) element).longValue());
            else if (element instanceof Float || element instanceof Double) out.add(((Number) element).doubleValue());
            else if (element == null || element instanceof Boolean) out.add(element);
            else out.add(element.toString());
        }
        return out;
    }

    private static Object value(ResultSet rs, int i, int type) throws SQLException {
        Object value;
        switch (type) {
            case Types.SMALLINT: case Types.INTEGER: case Types.BIGINT:
                value = rs.getLong(i);
                break;
            case Types.REAL: case Types.DOUBLE: case Types.FLOAT:
                value = rs.getDouble(i);
                break;
            case Types.BIT: case Types.BOOLEAN:
                value = rs.getBoolean(i);
                break;
            case Types.ARRAY:
                java.sql.Array array = rs.getArray(i);
                value = array == null ? null : elements(array.getArray());
                break;
            default:
                value = rs.getString(i);
        }
        return rs.wasNull() ? null : value;
    }

    private void drain(Map<String, Object> answer) {
        List<Object> notes = new ArrayList<>();
        try {
            PGConnection pg = conn.unwrap(PGConnection.class);
            PGNotification[] pending = pg.getNotifications();
            if (pending != null) {
                for (PGNotification n : pending) {
                    Map<String, Object> note = new LinkedHashMap<>();
                    note.put("channel", n.getName());
                    note.put("payload", n.getParameter());
                    notes.add(note);
                }
            }
            answer.put("notifications", notes);
            answer.put("parameters", new LinkedHashMap<Object, Object>(pg.getParameterStatuses()));
        } catch (SQLException e) {
            answer.put("notifications", notes);
        }
    }

    private static String text(Map<String, Object> request, String key) throws Usage {
        Object value = request.get(key);
        if (!(value instanceof String)) throw new Usage("request needs a string " + key);
        return (String) value;
    }

    static Map<String, Object> success(Object id) {
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("id", id);
        answer.put("ok", true);
        return answer;
    }

    static Map<String, Object> failure(Object id, String sqlstate, String cls, String message) {
        Map<String, Object> error = new LinkedHashMap<>();
        error.put("sqlstate", sqlstate == null ? "" : sqlstate);
        error.put("class", cls);
        error.put("message", message == null ? "" : message.split("\n", 2)[0]);
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("id", id);
        answer.put("ok", false);
        answer.put("error", error);
        return answer;
    }

    private static synchronized void send(Map<String, Object> answer) {
        OUT.println(Json.write(answer));
    }
}

/** JSON as the protocol needs it: objects, arrays, strings, integers, floats, booleans, null. */
final class Json {
    private final String s;
    private int i;

    private Json(String s) { this.s = s; }

    @SuppressWarnings("unchecked")
    static Map<String, Object> object(String line) {
        Json json = new Json(line);
        Object value = json.value();
        json.space();
        if (!(value instanceof Map) || json.i != line.length()) throw new IllegalArgumentException("not one JSON object");
        return (Map<String, Object>) value;
    }

    private void space() {
        while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++;
    }

    private char next() {
        space();
        if (i >= s.length()) throw new IllegalArgumentException("unexpected end");
        return s.charAt(i);
    }

    private void expect(char c) {
        if (next() != c) throw new IllegalArgumentException("expected " + c + " at " + i);
        i++;
    }

    private Object value() {
        char c = next();
        if (c == '{') {
            Map<String, Object> map = new LinkedHashMap<>();
            i++;
            if (next() == '}') { i++; return map; }
            do {
                String key = string();
                expect(':');
                map.put(key, value());
            } while (comma());
            expect('}');
            return map;
        }
        if (c == '[') {
            List<Object> list = new ArrayList<>();
            i++;
            if (next() == ']') { i++; return list; }
            do list.add(value()); while (comma());
            expect(']');
            return list;
        }
        if (c == '"') return string();
        for (String word : new String[] {"true", "false", "null"}) {
            if (s.startsWith(word, i)) {
                i += word.length();
                return word.equals("null") ? null : Boolean.valueOf(word.equals("true"));
            }
        }
        int start = i;
        while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
        String number = s.substring(start, i);
        if (number.isEmpty()) throw new IllegalArgumentException("unexpected " + c + " at " + start);
        return number.matches("-?\\d+") ? (Object) Long.valueOf(number) : (Object) Double.valueOf(number);
    }

    private boolean comma() {
        if (next() != ',') return false;
        i++;
        return true;
    }

    private String string() {
        expect('"');
        StringBuilder out = new StringBuilder();
        while (true) {
            if (i >= s.length()) throw new IllegalArgumentException("unterminated string");
            char c = s.charAt(i++);
            if (c == '"') return out.toString();
            if (c != '\\') { out.append(c); continue; }
            char e = s.charAt(i++);
            switch (e) {
                case 'n': out.append('\n'); break;
                case 't': out.append('\t'); break;
                case 'r': out.append('\r'); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'u': out.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                default: out.append(e);
            }
        }
    }

    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(value, out);
        return out.toString();
    }

    private static void write(Object value, StringBuilder out) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Boolean || value instanceof Long || value instanceof Integer) {
            out.append(value);
        } else if (value instanceof Double) {
            double d = (Double) value;
            if (Double.isFinite(d)) out.append(value); else write(String.valueOf(value), out);
        } else if (value instanceof Map) {
            out.append('{');
            String sep = "";
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                out.append(sep);
                write(String.valueOf(e.getKey()), out);
                out.append(':');
                write(e.getValue(), out);
                sep = ",";
            }
            out.append('}');
        } else if (value instanceof List) {
            out.append('[');
            String sep = "";
            for (Object item : (List<?>) value) {
                out.append(sep);
                write(item, out);
                sep = ",";
            }
            out.append(']');
        } else {
            out.append('"');
            for (char c : value.toString().toCharArray()) {
                if (c == '"' || c == '\\') out.append('\\').append(c);
                else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
                else out.append(c);
            }
            out.append('"');
        }
    }
}
