// A JDBC service on MariaDB as production runs one: the JDK's HTTP server, a
// HikariCP pool opened at start-up, MariaDB Connector/J with server-side
// prepared statements (`useServerPrepStmts`: a statement's first use on a
// connection pipelines its COM_STMT_PREPARE with its first execution; later
// ones execute the cached statement by id). A page reads a customer's orders,
// then each order's items one query at a time (an N+1 of ORDERS); `fixed`
// reads the items in one IN query; `-tx` runs the page in a transaction
// (autocommit switched off and on around it). Each answer says how many statements the
// page sent. With WHYSLOW_TRUTH set, each page is recorded out of band as
// apps/truth.py records one: its client port, when it was read and answered,
// its wait for a pooled connection, and each statement with the local port
// of the connection it ran on (asked of the server once per connection,
// before any capture: the pool is opened at start-up).
// Usage: java -cp mariadb.jar:hikari.jar:slf4j.jar MyPage.java PORT DB_PORT ORDERS POOL broken|fixed[-tx] [RENDER_MS]
import com.sun.net.httpserver.HttpServer;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.io.FileWriter;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;

public class MyPage {
    static final String TRUTH = System.getenv("WHYSLOW_TRUTH");
    static final AtomicLong SEQ = new AtomicLong();
    /** Each pooled connection's local port, by the driver's connection. */
    static final Map<Object, Integer> PORTS = new ConcurrentHashMap<>();

    static long nowUs() {
        Instant i = Instant.now();
        return i.getEpochSecond() * 1_000_000L + i.getNano() / 1_000;
    }

    /** The local port of `c`, asked of the server the first time. */
    static int localPort(Connection c) throws Exception {
        Object driver = c.unwrap(org.mariadb.jdbc.Connection.class);
        Integer port = PORTS.get(driver);
        if (port == null) {
            try (Statement s = c.createStatement();
                 ResultSet r = s.executeQuery(
                         "SELECT host FROM information_schema.processlist WHERE id = CONNECTION_ID()")) {
                r.next();
                String host = r.getString(1);
                port = Integer.parseInt(host.substring(host.lastIndexOf(':') + 1));
            }
            PORTS.put(driver, port);
        }
        return port;
    }

    /** One page's record: a JSON line of the truth file. */
    static final class Page {
        final int clientPort;
        final long receivedUs = nowUs();
        long poolWaitUs;
        final StringBuilder calls = new StringBuilder();

        Page(int clientPort) {
            this.clientPort = clientPort;
        }

        long[] start() {
            return new long[] {SEQ.getAndIncrement(), nowUs()};
        }

        void done(int port, long[] call) {
            if (calls.length() > 0) calls.append(',');
            calls.append("{\"local_port\":").append(port).append(",\"seq\":").append(call[0])
                    .append(",\"sent_us\":").append(call[1]).append(",\"done_us\":").append(nowUs())
                    .append('}');
        }

        void served() throws IOException {
            if (TRUTH == null) return;
            String line = "{\"client_port\":" + clientPort + ",\"received_us\":" + receivedUs
                    + ",\"answered_us\":" + nowUs() + ",\"pool_wait_us\":" + poolWaitUs
                    + ",\"calls\":[" + calls + "]}\n";
            synchronized (MyPage.class) {
                try (FileWriter w = new FileWriter(TRUTH, true)) {
                    w.write(line);
                }
            }
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String url = "jdbc:mariadb://127.0.0.1:" + args[1]
                + "/shop?user=app&password=app&useServerPrepStmts=true";
        int orders = Integer.parseInt(args[2]);
        int poolSize = Integer.parseInt(args[3]);
        boolean fixed = args[4].startsWith("fixed");
        // A transaction a page as Spring's @Transactional runs one on a
        // pooled connection: autocommit off, COMMIT, autocommit back on.
        boolean tx = args[4].endsWith("-tx");
        // Its own work after the statements (ms): a test that paces requests
        // sets it above their spacing, so that they overlap on any host.
        long renderMs = args.length > 5 ? Long.parseLong(args[5]) : 0;
        try (Connection c = DriverManager.getConnection(url); Statement s = c.createStatement()) {
            s.execute("DROP TABLE IF EXISTS items");
            s.execute("DROP TABLE IF EXISTS orders");
            s.execute("CREATE TABLE orders (id INT PRIMARY KEY, customer INT)");
            s.execute("CREATE TABLE items (order_id INT, sku VARCHAR(40), qty INT)");
            for (int o = 1; o <= orders; o++) {
                s.execute("INSERT INTO orders VALUES (" + o + ", 1)");
                for (int k = 1; k <= 3; k++) {
                    s.execute("INSERT INTO items VALUES (" + o + ", 'sku-" + o + "-" + k + "', " + k + ")");
                }
            }
        }
        HikariConfig config = new HikariConfig();
        config.setJdbcUrl(url);
        config.setMaximumPoolSize(poolSize);
        config.setMinimumIdle(poolSize);
        HikariDataSource pool = new HikariDataSource(config);
        // Every connection open before the first page.
        List<Connection> warm = new ArrayList<>();
        for (int i = 0; i < poolSize; i++) warm.add(pool.getConnection());
        for (Connection c : warm) {
            localPort(c);
            c.close();
        }
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 64);
        server.setExecutor(Executors.newFixedThreadPool(16));
        server.createContext("/orders", exchange -> {
            int items = 0;
            int statements = 0;
            int code = 200;
            Page page = new Page(exchange.getRemoteAddress().getPort());
            long asked = nowUs();
            Connection c = null;
            int dbPort = 0;
            try {
                c = pool.getConnection();
                page.poolWaitUs = nowUs() - asked;
                dbPort = localPort(c);
                if (tx) {
                    long[] call = page.start();
                    c.setAutoCommit(false);
                    page.done(dbPort, call);
                }
                List<Integer> ids = new ArrayList<>();
                try (PreparedStatement q = c.prepareStatement(
                        "SELECT id FROM orders WHERE customer = ? ORDER BY id")) {
                    q.setInt(1, 1);
                    statements++;
                    long[] call = page.start();
                    try (ResultSet r = q.executeQuery()) {
                        while (r.next()) ids.add(r.getInt(1));
                    }
                    page.done(dbPort, call);
                }
                if (fixed) {
                    StringBuilder marks = new StringBuilder();
                    for (int i = 0; i < ids.size(); i++) marks.append(i == 0 ? "?" : ", ?");
                    try (PreparedStatement q = c.prepareStatement(
                            "SELECT sku, qty FROM items WHERE order_id IN (" + marks + ")")) {
                        for (int i = 0; i < ids.size(); i++) q.setInt(i + 1, ids.get(i));
                        statements++;
                        long[] call = page.start();
                        try (ResultSet r = q.executeQuery()) {
                            while (r.next()) items++;
                        }
                        page.done(dbPort, call);
                    }
                } else {
                    for (int id : ids) {
                        try (PreparedStatement q = c.prepareStatement(
                                "SELECT sku, qty FROM items WHERE order_id = ?")) {
                            q.setInt(1, id);
                            statements++;
                            long[] call = page.start();
                            try (ResultSet r = q.executeQuery()) {
                                while (r.next()) items++;
                            }
                            page.done(dbPort, call);
                        }
                    }
                }
                if (tx) {
                    long[] call = page.start();
                    c.commit();
                    page.done(dbPort, call);
                }
            } catch (Exception e) {
                code = 500;
            } finally {
                if (c != null) {
                    // With `tx`, the pool puts autocommit back as it takes
                    // the connection back: one more statement.
                    long[] call = page.start();
                    try {
                        c.close();
                    } catch (Exception e) {
                        code = 500;
                    }
                    if (tx) page.done(dbPort, call);
                }
            }
            if (renderMs > 0) {
                try {
                    Thread.sleep(renderMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            byte[] body = ("{\"items\":" + items + ",\"statements\":" + statements + "}\n")
                    .getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", "application/json");
            exchange.sendResponseHeaders(code, body.length);
            try (OutputStream o = exchange.getResponseBody()) {
                o.write(body);
            }
            page.served();
        });
        server.start();
    }
}
