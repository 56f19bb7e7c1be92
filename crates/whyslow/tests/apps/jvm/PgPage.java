// A JDBC service as production runs one: the JDK's HTTP server, a fixed pool
// of pgJDBC connections opened at start-up, the driver's defaults (server-side
// named statements from a statement's fifth execution on a connection,
// autocommit off: BEGIN sent in the same write as the first query). A page
// reads a customer's orders, then each order's items one query at a time (an
// N+1 of ORDERS), in one transaction.
// Usage: java -cp postgresql.jar PgPage.java PORT PG_PORT ORDERS POOL
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.Executors;

public class PgPage {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String url = "jdbc:postgresql://127.0.0.1:" + args[1] + "/postgres?user=postgres";
        int orders = Integer.parseInt(args[2]);
        int poolSize = Integer.parseInt(args[3]);
        try (Connection c = DriverManager.getConnection(url); Statement s = c.createStatement()) {
            s.execute("DROP TABLE IF EXISTS items; DROP TABLE IF EXISTS orders");
            s.execute("CREATE TABLE orders (id int PRIMARY KEY, customer int)");
            s.execute("CREATE TABLE items (order_id int, sku text, qty int)");
            s.execute("INSERT INTO orders SELECT g, 1 FROM generate_series(1, " + orders + ") g");
            s.execute("INSERT INTO items SELECT o, 'sku-' || o || '-' || k, k"
                    + " FROM generate_series(1, " + orders + ") o, generate_series(1, 3) k");
        }
        BlockingQueue<Connection> pool = new ArrayBlockingQueue<>(poolSize);
        for (int i = 0; i < poolSize; i++) {
            Connection c = DriverManager.getConnection(url);
            c.setAutoCommit(false);
            pool.add(c);
        }
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 64);
        server.setExecutor(Executors.newFixedThreadPool(16));
        server.createContext("/orders", exchange -> {
            int items = 0;
            int code = 200;
            Connection c = null;
            try {
                c = pool.take();
                List<Integer> ids = new ArrayList<>();
                try (PreparedStatement q = c.prepareStatement(
                        "SELECT id FROM orders WHERE customer = ? ORDER BY id")) {
                    q.setInt(1, 1);
                    try (ResultSet r = q.executeQuery()) {
                        while (r.next()) ids.add(r.getInt(1));
                    }
                }
                for (int id : ids) {
                    try (PreparedStatement q = c.prepareStatement(
                            "SELECT sku, qty FROM items WHERE order_id = ?")) {
                        q.setInt(1, id);
                        try (ResultSet r = q.executeQuery()) {
                            while (r.next()) items++;
                        }
                    }
                }
                c.commit();
            } catch (Exception e) {
                code = 500;
            } finally {
                if (c != null) pool.add(c);
            }
            byte[] body = ("{\"items\":" + items + "}\n").getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", "application/json");
            exchange.sendResponseHeaders(code, body.length);
            try (OutputStream o = exchange.getResponseBody()) {
                o.write(body);
            }
        });
        server.start();
    }
}
