// leakcheck agent for Spring Boot + Hibernate ORM + HikariCP + pgjdbc (Maven Central, pom.xml): one client
// slot, JSON lines on stdin/stdout (docs: agent protocol 1). pgjdbc's Agent.java is compiled beside it for
// its JSON and row helpers.
//
// `connect` points the application's DataSource at a new HikariDataSource of one connection (the slot's),
// the request's pgjdbc settings in the JDBC URL, as an application's spring.datasource.url has them.
// query/execute = Spring's JdbcTemplate with a plain Statement whose prepareThreshold is 0 (never named),
// on the transaction's connection while one is open; prepared = a Hibernate native query (JPA's
// createNativeQuery().getResultList() on Spring's shared EntityManager), each run a PreparedStatement
// pgjdbc names S_n from its prepareThreshold-th run of the text; begin/commit/rollback = Spring's
// PlatformTransactionManager (Spring Boot's JpaTransactionManager), held on the worker thread; cancel =
// Statement.cancel() of the statement running (what Hibernate's Session.cancelQuery does), or pgjdbc's
// cancelQuery with the connection's key when nothing runs. The application (SpringApplication, Hibernate's
// EntityManagerFactory) boots at the first request that needs JPA.

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.regex.Pattern;

import javax.sql.DataSource;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import com.zaxxer.hikari.util.DriverDataSource;
import jakarta.persistence.EntityManager;
import jakarta.persistence.EntityManagerFactory;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;
import org.postgresql.PGProperty;
import org.postgresql.PGStatement;
import org.springframework.boot.SpringBootVersion;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.ImportAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.hibernate.autoconfigure.HibernateJpaAutoConfiguration;
import org.springframework.boot.persistence.autoconfigure.EntityScan;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.core.StatementCallback;
import org.springframework.jdbc.datasource.DelegatingDataSource;
import org.springframework.orm.jpa.SharedEntityManagerCreator;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.TransactionStatus;
import org.springframework.transaction.support.DefaultTransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

@Configuration(proxyBeanMethods = false)
@ImportAutoConfiguration(HibernateJpaAutoConfiguration.class) // what @SpringBootApplication applies for JPA; none else
@EntityScan("leakcheck.agent.entities") // none: the agent runs SQL only (the default package would scan everything)
public class HibernateAgent {
    private static final Pattern RETURNING = Pattern.compile("\\breturning\\b", Pattern.CASE_INSENSITIVE);

    /** The DataSource the application boots with; `connect` points it at the slot's own pool (none before). */
    private static final DelegatingDataSource SOURCE = new DelegatingDataSource() {
        @Override
        public void afterPropertiesSet() { }
    };

    /**
     * The housekeeping thread of every pool the agent makes (HikariConfig.setScheduledExecutor, configured as
     * Hikari configures its own): a slot's pools come one after another, and a pool of its own would start and
     * stop a thread each time. Each pool still schedules and cancels its own tasks on it, as on its own.
     */
    private static final ScheduledThreadPoolExecutor HOUSEKEEPER = housekeeper();

    /** Plain statements through Spring JDBC: on the transaction's connection while one is open, else the pool's. */
    private final JdbcTemplate jdbc = new JdbcTemplate(SOURCE);
    /** Spring's shared EntityManager and its JpaTransactionManager, once the application has booted. */
    private EntityManager entities;
    private PlatformTransactionManager transactions;
    private HikariDataSource pool;
    private TransactionStatus open;
    /** The statement running now and the last connection used, for `cancel` from the reader thread. */
    private volatile Statement running;
    private volatile PGConnection last;
    private volatile long cancelSignalTimeoutMs = 10_000L;

    /** A request the caller got wrong (class "usage") or one the ORM has no API for ("unsupported"). */
    static final class Refused extends Exception {
        final String kind;
        Refused(String kind, String message) { super(message); this.kind = kind; }
    }

    private static ScheduledThreadPoolExecutor housekeeper() {
        ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1, task -> {
            Thread thread = new Thread(task, "leakcheck housekeeper");
            thread.setDaemon(true);
            return thread;
        }, new ThreadPoolExecutor.DiscardPolicy());
        executor.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
        executor.setRemoveOnCancelPolicy(true);
        return executor;
    }

    @Bean
    DataSource dataSource() {
        return SOURCE;
    }

    /**
     * Boots the application (SpringApplication: Hibernate's EntityManagerFactory, JpaTransactionManager) at the
     * first request that needs JPA or its transactions: booting sends nothing to the server, and an agent that
     * only runs plain statements (a probe's third client) never pays for it.
     */
    private void boot() {
        if (entities != null) return;
        ConfigurableApplicationContext context = new SpringApplicationBuilder(HibernateAgent.class)
                .web(WebApplicationType.NONE).logStartupInfo(false)
                .properties("spring.main.banner-mode=off", "logging.level.root=WARN",
                        "spring.sql.init.mode=never", "spring.jpa.hibernate.ddl-auto=none",
                        // no connection at boot (there is no endpoint yet): the database is named, not asked
                        "spring.jpa.properties.jakarta.persistence.database-product-name=PostgreSQL",
                        "spring.jpa.properties.hibernate.boot.allow_jdbc_metadata_access=false")
                .run();
        transactions = context.getBean(PlatformTransactionManager.class);
        entities = SharedEntityManagerCreator.createSharedEntityManager(context.getBean(EntityManagerFactory.class));
    }

    public static void main(String[] args) throws Exception {
        System.setOut(System.err); // the protocol's stdout is Agent's own
        // warnings only, as Spring Boot's logging.level.root below (logback's own default is DEBUG, until it boots)
        ((ch.qos.logback.classic.Logger) org.slf4j.LoggerFactory.getLogger(org.slf4j.Logger.ROOT_LOGGER_NAME))
                .setLevel(ch.qos.logback.classic.Level.WARN);
        Agent.keepSaltedPasswords();
        HibernateAgent agent = new HibernateAgent();
        if (args.length > 0 && args[0].equals("--boot-and-exit")) { // the build's class-data archive run
            agent.boot();
            Agent.loadJarOf(org.postgresql.Driver.class); // and what connect and the requests load after boot
            Agent.loadJarOf(HikariDataSource.class);
            System.exit(0);
        }
        Agent.serve(agent::answer, agent::cancel); // (Spring binds a transaction to the worker thread: this one)
        agent.close();
        System.exit(0);
    }

    private Map<String, Object> cancel(Object id) {
        Statement statement = running;
        PGConnection connection = last;
        try {
            if (statement != null) {
                statement.cancel();
                return Agent.success(id);
            }
            if (pool == null || connection == null) return Agent.failure(id, "", "usage", "not connected: send connect first");
            // Nothing runs: pgjdbc's cancelQuery sends the connection's key all the same, and returns once the
            // peer closed the cancel connection (`closed`), or silently after its cancelSignalTimeout.
            long started = System.nanoTime();
            connection.cancelQuery();
            Map<String, Object> answer = Agent.success(id);
            if ((System.nanoTime() - started) / 1_000_000L < cancelSignalTimeoutMs) answer.put("closed", true);
            return answer;
        } catch (SQLException e) {
            return Agent.failure(id, e.getSQLState(), e.getClass().getName(), e.getMessage());
        }
    }

    private Map<String, Object> answer(Map<String, Object> request) {
        Object id = request.get("id");
        Map<String, Object> answer = Agent.success(id);
        try {
            run(String.valueOf(request.get("op")), request, answer);
        } catch (Refused e) {
            answer = Agent.failure(id, "", e.kind, e.getMessage());
        } catch (RuntimeException | SQLException e) { // Spring's DataAccessException, Hibernate's, pgjdbc's
            SQLException cause = sqlCause(e);
            String state = cause == null || cause.getSQLState() == null ? "" : cause.getSQLState();
            answer = Agent.failure(id, state, e.getClass().getName(), (cause != null ? cause : e).getMessage());
        }
        if (pool != null) drain(answer);
        return answer;
    }

    /** A DataSource whose first connection is one already opened (the pool's first, opened by `connect`). */
    static final class Opened extends DelegatingDataSource {
        private Connection first;

        Opened(DataSource target, Connection first) {
            super(target);
            this.first = first;
        }

        @Override
        public Connection getConnection() throws SQLException {
            Connection connection = first;
            first = null;
            return connection != null ? connection : super.getConnection();
        }

        void closeUntaken() {
            Connection connection = first;
            first = null;
            if (connection == null) return;
            try {
                connection.close();
            } catch (SQLException ignored) { // its socket is closed all the same
            }
        }
    }

    private static SQLException sqlCause(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (t instanceof SQLException) return (SQLException) t;
        }
        return null;
    }

    private void run(String op, Map<String, Object> request, Map<String, Object> answer) throws SQLException, Refused {
        switch (op) {
            case "hello":
                answer.put("protocol", 1);
                answer.put("driver", "hibernate");
                answer.put("release", org.hibernate.Version.getVersionString());
                answer.put("runtime", "java " + System.getProperty("java.version") + ", Spring Boot " + SpringBootVersion.getVersion()
                        + ", HikariCP " + version("/META-INF/maven/com.zaxxer/HikariCP/pom.properties")
                        + ", pgjdbc " + org.postgresql.util.DriverInfo.DRIVER_VERSION);
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
        if (pool == null) throw new Refused("usage", "not connected: send connect first");
        String sql = request.get("sql") instanceof String ? (String) request.get("sql") : "";
        switch (op) {
            case "query":
                answer.put("rows", jdbc.execute(plain(sql, true)));
                return;
            case "execute":
                jdbc.execute(plain(sql, false));
                return;
            case "prepared": {
                boot();
                int times = request.get("times") == null ? 1 : ((Number) request.get("times")).intValue();
                List<?> result = List.of();
                boolean reads = sql.strip().toLowerCase().startsWith("select");
                boolean returns = RETURNING.matcher(sql).find();  // a write with a result: read as a query
                for (int i = 0; i < times; i++) {
                    if (reads || (returns && open != null)) {
                        result = entities.createNativeQuery(sql).getResultList();
                    } else if (returns) {
                        result = new TransactionTemplate(transactions).execute(
                                status -> entities.createNativeQuery(sql).getResultList());
                    } else if (open != null) {  // a write inside the transaction begin opened
                        entities.createNativeQuery(sql).executeUpdate();
                    } else {  // a write outside one: JPA wants a transaction, a @Transactional method's own
                        new TransactionTemplate(transactions).executeWithoutResult(
                                status -> entities.createNativeQuery(sql).executeUpdate());
                    }
                }
                List<Object> rows = new ArrayList<>();
                for (Object row : result) rows.add(row instanceof Object[] ? Agent.elements(row) : Agent.elements(new Object[] {row}));
                answer.put("rows", rows);
                return;
            }
            case "free":
                throw new Refused("unsupported", "Hibernate closes its PreparedStatement after each query and has no API to "
                        + "drop the server statement pgjdbc's cache keeps");
            case "begin":
                if (open != null) throw new Refused("usage", "a transaction is already open");
                boot();
                open = transactions.getTransaction(new DefaultTransactionDefinition());
                return;
            case "commit":
            case "rollback": {
                if (open == null) throw new Refused("usage", "no transaction is open: send begin first");
                TransactionStatus status = open;
                open = null;
                if (op.equals("commit")) transactions.commit(status); else transactions.rollback(status);
                return;
            }
            default:
                throw new Refused("usage", "unknown op " + op);
        }
    }

    /** A plain Statement from the pool (the transaction's connection while one is open), never named by pgjdbc. */
    private StatementCallback<List<Object>> plain(String sql, boolean rows) {
        return statement -> {
            statement.unwrap(PGStatement.class).setPrepareThreshold(0);
            last = statement.getConnection().unwrap(PGConnection.class);
            running = statement;
            try {
                if (!statement.execute(sql) || !rows) return null;
                return Agent.rows(statement.getResultSet());
            } finally {
                running = null;
            }
        };
    }

    private void connect(Map<String, Object> request) throws Refused, SQLException {
        close();
        Properties props = new Properties();
        props.setProperty("connectTimeout", "10");
        props.setProperty("loginTimeout", "10");
        if (request.get("settings") instanceof Map) {
            for (Map.Entry<?, ?> e : ((Map<?, ?>) request.get("settings")).entrySet()) {
                String name = String.valueOf(e.getKey());
                if (PGProperty.forName(name) == null) throw new Refused("usage", "unknown pgjdbc setting " + name);
                props.setProperty(name, String.valueOf(e.getValue()));
            }
        }
        String host = text(request, "host");
        if (host.startsWith("/")) { // a Unix socket's folder (a fleet's member): junixsocket, as pgjdbc's agent
            props.setProperty("socketFactory", "org.newsclub.net.unix.AFUNIXSocketFactory$FactoryArg");
            props.setProperty("socketFactoryArg", host + "/.s.PGSQL." + request.get("port"));
            host = "localhost";
        }
        // The DataSource Hikari builds from a jdbcUrl, user and password (its DriverDataSource: pgjdbc's Driver
        // with these properties), and the pool's first connection opened with it here: Hikari's start sleeps 1 s
        // after a refused first login before it throws (HikariPool.checkFailFast, whatever its
        // initializationFailTimeout), which an application pays once and the agent at each refused connect.
        // The login, and every check the pool makes of the connection after it, are the same.
        DataSource driver = new DriverDataSource(
                "jdbc:postgresql://" + host + ":" + request.get("port") + "/" + text(request, "dbname"), null, props,
                text(request, "user"), request.get("password") == null ? "" : text(request, "password"));
        HikariConfig config = new HikariConfig();
        config.setMaximumPoolSize(1); // the slot's one connection: a bigger pool would be several clients
        config.setMinimumIdle(1);
        config.setConnectionTimeout(10_000L);
        config.setPoolName("leakcheck");
        config.setScheduledExecutor(HOUSEKEEPER);
        cancelSignalTimeoutMs = 1000L * PGProperty.CANCEL_SIGNAL_TIMEOUT.getInt(props);
        Opened opened = new Opened(driver, driver.getConnection());
        config.setDataSource(opened);
        try {
            pool = new HikariDataSource(config); // its checks of the connection opened above
        } catch (RuntimeException e) {
            opened.closeUntaken(); // the pool closes one it took and failed to set up; not one it never took
            SQLException cause = sqlCause(e);
            if (cause != null) throw cause;
            throw e;
        }
        SOURCE.setTargetDataSource(pool);
        try (Connection connection = pool.getConnection()) {
            last = connection.unwrap(PGConnection.class);
        }
    }

    private void close() {
        if (open != null) {
            TransactionStatus status = open;
            open = null;
            try {
                transactions.rollback(status);
            } catch (RuntimeException e) {
                System.err.println("agent: rollback at close: " + e);
            }
        }
        last = null;
        if (pool != null) pool.close();
        pool = null;
    }

    /** Notifications and ParameterStatus values pgjdbc holds for the slot's one connection (the worker's own thread). */
    private void drain(Map<String, Object> answer) {
        List<Object> notes = new ArrayList<>();
        answer.put("notifications", notes);
        PGConnection connection = last;
        if (connection == null) return;
        try {
            PGNotification[] pending = connection.getNotifications();
            if (pending != null) {
                for (PGNotification n : pending) notes.add(Map.of("channel", n.getName(), "payload", n.getParameter()));
            }
            answer.put("parameters", new LinkedHashMap<Object, Object>(connection.getParameterStatuses()));
        } catch (SQLException e) {
            System.err.println("agent: notifications: " + e);
        }
    }

    /** The `version` a jar's Maven pom.properties gives (HikariCP's manifest has none). */
    private static String version(String resource) {
        Properties found = new Properties();
        try (java.io.InputStream in = HibernateAgent.class.getResourceAsStream(resource)) {
            if (in != null) found.load(in);
        } catch (java.io.IOException e) {
            System.err.println("agent: " + resource + ": " + e);
        }
        return found.getProperty("version", "unknown");
    }

    private static String text(Map<String, Object> request, String key) throws Refused {
        Object value = request.get(key);
        if (!(value instanceof String)) throw new Refused("usage", "request needs a string " + key);
        return (String) value;
    }
}
