// A JDBC service as production runs one: the JDK's HTTP server, a HikariCP
// pool of pgJDBC connections opened at start-up, the driver's defaults (server-side
// named statements from a statement's fifth execution on a connection,
// autocommit off: BEGIN sent in the same write as the first query). A page
// reads a customer's orders, then each order's items one query at a time (an
// N+1 of ORDERS), in one transaction; `fixed` reads the items in one IN query.
// Each answer says how many statements the page sent. With WHYSLOW_TRUTH set,
// each page is recorded out of band as apps/truth.py records one: its client
// port, when it was read and answered, its wait for a pooled connection, and
// each statement (COMMIT too) with the local port of its connection.
// Usage: java -cp postgresql.jar:hikari.jar:slf4j.jar PgPage.java PORT PG_PORT ORDERS POOL [broken|fixed [RENDER_MS]]
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

public class PgPage {
    static final String TRUTH = System.getenv("WHYSLOW_TRUTH");
    static long seq;

    static long nowUs() {
        Instant i = Instant.now();
        return i.getEpochSecond() * 1_000_000L + i.getNano() / 1_000;
    }

    static synchronized long nextSeq() {
        return seq++;
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
            return new long[] {nextSeq(), nowUs()};
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
            synchronized (PgPage.class) {
                try (FileWriter w = new FileWriter(TRUTH, true)) {
                    w.write(line);
                }
            }
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String url = "jdbc:postgresql://127.0.0.1:" + args[1] + "/postgres?user=postgres";
        int orders = Integer.parseInt(args[2]);
        int poolSize = Integer.parseInt(args[3]);
        boolean fixed = args.length > 4 && args[4].equals("fixed");
        // Its own work after the statements (ms): a test that paces requests
        // sets it above their spacing, so that they overlap on any host.
        long renderMs = args.length > 5 ? Long.parseLong(args[5]) : 0;
        try (Connection c = DriverManager.getConnection(url); Statement s = c.createStatement()) {
            s.execute("DROP TABLE IF EXISTS items; DROP TABLE IF EXISTS orders");
            s.execute("CREATE TABLE orders (id int PRIMARY KEY, customer int)");
            s.execute("CREATE TABLE items (order_id int, sku text, qty int)");
            s.execute("INSERT INTO orders SELECT g, 1 FROM generate_series(1, " + orders + ") g");
            s.execute("INSERT INTO items SELECT o, 'sku-' || o || '-' || k, k"
                    + " FROM generate_series(1, " + orders + ") o, generate_series(1, 3) k");
        }
        HikariConfig config = new HikariConfig();
        config.setJdbcUrl(url);
        config.setMaximumPoolSize(poolSize);
        config.setMinimumIdle(poolSize);
        config.setAutoCommit(false);
        HikariDataSource pool = new HikariDataSource(config);
        // Each connection's local port, asked of the server before any page
        // (every connection open before the first page).
        Map<Object, Integer> ports = new ConcurrentHashMap<>();
        List<Connection> warm = new ArrayList<>();
        for (int i = 0; i < poolSize; i++) warm.add(pool.getConnection());
        for (Connection c : warm) {
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("SELECT inet_client_port()")) {
                r.next();
                ports.put(c.unwrap(org.postgresql.PGConnection.class), r.getInt(1));
            }
            c.commit();
            c.close();
        }
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 64);
        server.setExecutor(Executors.newFixedThreadPool(16));
        server.createContext("/orders", exchange -> {
            int items = 0;
            int statements = 0;
            int code = 200;
            Page page = new Page(exchange.getRemoteAddress().getPort());
            Connection c = null;
            try {
                long asked = nowUs();
                c = pool.getConnection();
                page.poolWaitUs = nowUs() - asked;
                int dbPort = ports.get(c.unwrap(org.postgresql.PGConnection.class));
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
                long[] call = page.start();
                c.commit();
                page.done(dbPort, call);
            } catch (Exception e) {
                code = 500;
            } finally {
                if (c != null) {
                    try {
                        c.close();
                    } catch (Exception e) {
                        code = 500;
                    }
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
