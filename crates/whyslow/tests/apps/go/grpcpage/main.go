// Case 002 over gRPC in Go (google.golang.org/grpc): a backing server
// whose one method takes a few milliseconds, and a front (net/http) whose
// page makes CALLS calls of it at once (errgroup) over one gRPC
// connection. The server's MAX_CONCURRENT_STREAMS (`streams`, 0 for grpc's
// default) is the case's pool of five: at 2, the calls queue for a stream.
// Messages are raw bytes through a codec of their own, so no generated
// code is needed; each call asks for a different item.
//
// The front's connection opens with its first call (grpc.NewClient is
// lazy), so a capture begun before that sees its HPACK state whole.
//
// With `tls`, both ends speak TLS (Go's crypto/tls): the server with a
// certificate made at start, the front trusting any; the front writes its
// session keys to SSLKEYLOGFILE if set (for tshark to compare with; whyslow
// reads the plaintext with eBPF, no keys).
//
// Usage: grpcpage server PORT STREAMS LATENCY_MS [tls]
//
//	grpcpage front PORT SERVER_PORT CALLS [tls]
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

const method = "/shop.Items/Get"

// raw passes messages as they are.
type raw struct{}

func (raw) Marshal(v any) ([]byte, error)   { return *(v.(*[]byte)), nil }
func (raw) Unmarshal(b []byte, v any) error { *(v.(*[]byte)) = append([]byte(nil), b...); return nil }
func (raw) Name() string                    { return "proto" }

func certificate() tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	template := x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, &template, &template, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func serve(port string, streams uint32, latency time.Duration, useTLS bool) {
	handler := func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var in []byte
		if err := dec(&in); err != nil {
			return nil, err
		}
		time.Sleep(latency)
		out := []byte(fmt.Sprintf("item for %x", in))
		return &out, nil
	}
	desc := grpc.ServiceDesc{
		ServiceName: "shop.Items",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Get", Handler: handler}},
	}
	opts := []grpc.ServerOption{}
	if streams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(streams))
	}
	if useTLS {
		cert := certificate()
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(&desc, struct{}{})
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		panic(err)
	}
	panic(s.Serve(l))
}

func front(port, server string, calls int, useTLS bool) {
	creds := insecure.NewCredentials()
	if useTLS {
		config := &tls.Config{InsecureSkipVerify: true}
		if path := os.Getenv("SSLKEYLOGFILE"); path != "" {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				panic(err)
			}
			config.KeyLogWriter = f
		}
		creds = credentials.NewTLS(config)
	}
	conn, err := grpc.NewClient("127.0.0.1:"+server, grpc.WithTransportCredentials(creds))
	if err != nil {
		panic(err)
	}
	http.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		g, ctx := errgroup.WithContext(r.Context())
		for i := range calls {
			g.Go(func() error {
				in := []byte(fmt.Sprintf("item-%d", i))
				var out []byte
				return conn.Invoke(ctx, method, &in, &out)
			})
		}
		if err := g.Wait(); err != nil {
			http.Error(w, "{}", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"items\":%d}\n", calls)
	})
	panic(http.ListenAndServe("127.0.0.1:"+port, nil))
}

func main() {
	encoding.RegisterCodec(raw{})
	useTLS := len(os.Args) > 5 && os.Args[5] == "tls"
	n, _ := strconv.Atoi(os.Args[3])
	switch os.Args[1] {
	case "server":
		ms, _ := strconv.Atoi(os.Args[4])
		serve(os.Args[2], uint32(n), time.Duration(ms)*time.Millisecond, useTLS)
	case "front":
		calls, _ := strconv.Atoi(os.Args[4])
		front(os.Args[2], os.Args[3], calls, useTLS)
	}
}
