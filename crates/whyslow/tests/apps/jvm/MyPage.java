// A JDBC service on MariaDB as production runs one: the JDK's HTTP server, a
// HikariCP pool opened at start-up, MariaDB Connector/J with server-side
// prepared statements (`useServerPrepStmts`: a statement's first use on a
// connection pipelines its COM_STMT_PREPARE with its first execution; later
// ones execute the cached statement by id). A page reads a customer's orders,
// then each order's items one query at a time (an N+1 of ORDERS); `fixed`
// reads the items in one IN query. Each answer says how many statements the
// page sent.
// Usage: java -cp mariadb.jar:hikari.jar:slf4j.jar MyPage.java PORT DB_PORT ORDERS POOL broken|fixed
import com.sun.net.httpserver.HttpServer;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
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
import java.util.concurrent.Executors;

public class MyPage {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String url = "jdbc:mariadb://127.0.0.1:" + args[1]
                + "/shop?user=app&password=app&useServerPrepStmts=true";
        int orders = Integer.parseInt(args[2]);
        int poolSize = Integer.parseInt(args[3]);
        boolean fixed = args[4].equals("fixed");
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
        for (Connection c : warm) c.close();
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 64);
        server.setExecutor(Executors.newFixedThreadPool(16));
        server.createContext("/orders", exchange -> {
            int items = 0;
            int statements = 0;
            int code = 200;
            try (Connection c = pool.getConnection()) {
                List<Integer> ids = new ArrayList<>();
                try (PreparedStatement q = c.prepareStatement(
                        "SELECT id FROM orders WHERE customer = ? ORDER BY id")) {
                    q.setInt(1, 1);
                    statements++;
                    try (ResultSet r = q.executeQuery()) {
                        while (r.next()) ids.add(r.getInt(1));
                    }
                }
                if (fixed) {
                    StringBuilder marks = new StringBuilder();
                    for (int i = 0; i < ids.size(); i++) marks.append(i == 0 ? "?" : ", ?");
                    try (PreparedStatement q = c.prepareStatement(
                            "SELECT sku, qty FROM items WHERE order_id IN (" + marks + ")")) {
                        for (int i = 0; i < ids.size(); i++) q.setInt(i + 1, ids.get(i));
                        statements++;
                        try (ResultSet r = q.executeQuery()) {
                            while (r.next()) items++;
                        }
                    }
                } else {
                    for (int id : ids) {
                        try (PreparedStatement q = c.prepareStatement(
                                "SELECT sku, qty FROM items WHERE order_id = ?")) {
                            q.setInt(1, id);
                            statements++;
                            try (ResultSet r = q.executeQuery()) {
                                while (r.next()) items++;
                            }
                        }
                    }
                }
            } catch (Exception e) {
                code = 500;
            }
            byte[] body = ("{\"items\":" + items + ",\"statements\":" + statements + "}\n")
                    .getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", "application/json");
            exchange.sendResponseHeaders(code, body.length);
            try (OutputStream o = exchange.getResponseBody()) {
                o.write(body);
            }
        });
        server.start();
    }
}
