// A Go service as production runs one: net/http and a pgx pool opened at
// start-up, the driver's defaults (each statement prepared by name on a
// connection at its first use, "stmtcache_" and a hash of its text). A page
// reads a customer's orders, then each order's items one query at a time (an
// N+1 of ORDERS), in one transaction.
// Usage: pgpage PORT PG_PORT ORDERS POOL
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	port, pgPort, orders, pool := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	ctx := context.Background()
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres?pool_max_conns=%s&pool_min_conns=%s", pgPort, pool, pool)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	n, _ := strconv.Atoi(orders)
	for _, s := range []string{
		"DROP TABLE IF EXISTS items", "DROP TABLE IF EXISTS orders",
		"CREATE TABLE orders (id int PRIMARY KEY, customer int)",
		"CREATE TABLE items (order_id int, sku text, qty int)",
		fmt.Sprintf("INSERT INTO orders SELECT g, 1 FROM generate_series(1, %d) g", n),
		fmt.Sprintf("INSERT INTO items SELECT o, 'sku-' || o || '-' || k, k FROM generate_series(1, %d) o, generate_series(1, 3) k", n),
	} {
		if _, err := db.Exec(ctx, s); err != nil {
			panic(err)
		}
	}
	http.HandleFunc("/orders", func(w http.ResponseWriter, r *http.Request) {
		items, err := page(r.Context(), db)
		if err != nil {
			http.Error(w, "{}", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"items\":%d}\n", items)
	})
	if err := http.ListenAndServe("127.0.0.1:"+port, nil); err != nil {
		panic(err)
	}
}

func page(ctx context.Context, db *pgxpool.Pool) (int, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, "SELECT id FROM orders WHERE customer = $1 ORDER BY id", 1)
	if err != nil {
		return 0, err
	}
	var ids []int32
	for rows.Next() {
		var id int32
		if err := rows.Scan(&id); err != nil {
			return 0, err
		}
		ids = append(ids, id)
	}
	if rows.Err() != nil {
		return 0, rows.Err()
	}
	items := 0
	for _, id := range ids {
		rows, err := tx.Query(ctx, "SELECT sku, qty FROM items WHERE order_id = $1", id)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
			items++
		}
		if rows.Err() != nil {
			return 0, rows.Err()
		}
	}
	return items, tx.Commit(ctx)
}
