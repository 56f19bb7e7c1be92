// A Go service on PostgreSQL over TLS, as production runs one: net/http,
// a pgx pool opened at start-up with sslmode=require, each statement
// checking a connection out of the pool. A page reads a customer's orders,
// then each order's items: `broken` one query per order, one after another
// (an N+1 of ORDERS); `fanout` the same queries at once, on goroutines
// started with errgroup; `fixed` all items in one query.
//
// With WHYSLOW_TRUTH set, it records each page it served out of band
// (apps/truth.py's format): the client's port, and per statement the local
// port of the connection it ran on, when it was sent and done.
//
// Usage: gopage PORT PG_PORT ORDERS POOL broken|fanout|fixed [RENDER_MS]
//
// RENDER_MS: its own work after the statements; a test that paces
// requests sets it above their spacing, so that they overlap on any host.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

type call struct {
	LocalPort int    `json:"local_port"`
	Seq       uint64 `json:"seq"`
	SentUs    int64  `json:"sent_us"`
	DoneUs    int64  `json:"done_us"`
}

type record struct {
	ClientPort int     `json:"client_port"`
	ReceivedUs int64   `json:"received_us"`
	AnsweredUs int64   `json:"answered_us"`
	Calls      []*call `json:"calls"`
	mu         sync.Mutex
}

var (
	seq       atomic.Uint64
	truthMu   sync.Mutex
	truthPath = os.Getenv("WHYSLOW_TRUTH")
)

func nowUs() int64 { return time.Now().UnixMicro() }

func port(a net.Addr) int {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.Port
	}
	return 0
}

// query runs one statement on a connection of its own from the pool and
// records it; each row is handed to `row`.
func query(ctx context.Context, db *pgxpool.Pool, rec *record, row func([]any) error, sql string, args ...any) error {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	c := &call{LocalPort: port(conn.Conn().PgConn().Conn().LocalAddr()), Seq: seq.Add(1), SentUs: nowUs()}
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			rows.Close()
			return err
		}
		if err := row(v); err != nil {
			rows.Close()
			return err
		}
	}
	rows.Close()
	c.DoneUs = nowUs()
	rec.mu.Lock()
	rec.Calls = append(rec.Calls, c)
	rec.mu.Unlock()
	return rows.Err()
}

// served appends `rec` to the record, opened anew each time: a test
// removes it to keep only the pages it captured.
func served(rec *record) {
	line, _ := json.Marshal(rec)
	truthMu.Lock()
	defer truthMu.Unlock()
	f, err := os.OpenFile(truthPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		panic(err)
	}
	f.Write(append(line, '\n'))
	f.Close()
}

func page(ctx context.Context, db *pgxpool.Pool, rec *record, variant string) (int64, error) {
	var ids []int32
	err := query(ctx, db, rec, func(v []any) error {
		ids = append(ids, v[0].(int32))
		return nil
	}, "SELECT id FROM orders WHERE customer = $1 ORDER BY id", 1)
	if err != nil {
		return 0, err
	}
	var items atomic.Int64
	count := func([]any) error { items.Add(1); return nil }
	const itemsOf = "SELECT sku, qty FROM items WHERE order_id = $1"
	switch variant {
	case "fixed":
		err := query(ctx, db, rec, count, "SELECT sku, qty FROM items WHERE order_id = ANY($1)", ids)
		return items.Load(), err
	case "broken":
		for _, id := range ids {
			if err := query(ctx, db, rec, count, itemsOf, id); err != nil {
				return 0, err
			}
		}
		return items.Load(), nil
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, id := range ids {
		g.Go(func() error {
			return query(gctx, db, rec, count, itemsOf, id)
		})
	}
	err = g.Wait()
	return items.Load(), err
}

func main() {
	listen, pgPort, orders, pool, variant := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	var render time.Duration
	if len(os.Args) > 6 {
		ms, _ := strconv.Atoi(os.Args[6])
		render = time.Duration(ms) * time.Millisecond
	}
	ctx := context.Background()
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%s/postgres?sslmode=require&pool_max_conns=%s&pool_min_conns=%s", pgPort, pool, pool)
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
		client, _ := net.ResolveTCPAddr("tcp", r.RemoteAddr)
		rec := &record{ClientPort: port(client), ReceivedUs: nowUs()}
		items, err := page(r.Context(), db, rec, variant)
		if err != nil {
			http.Error(w, "{}", http.StatusInternalServerError)
			return
		}
		time.Sleep(render)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"items\":%d}\n", items)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		rec.AnsweredUs = nowUs()
		if truthPath != "" {
			served(rec)
		}
	})
	if err := http.ListenAndServe("127.0.0.1:"+listen, nil); err != nil {
		panic(err)
	}
}
