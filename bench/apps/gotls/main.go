// An HTTPS service in Go's own TLS (crypto/tls, not libssl): a small JSON
// body per request, keep-alive, a certificate made at start. What
// bench/ebpf_overhead.sh traces with Go's TLS and goroutines hooked.
// Usage: gotls PORT
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"os"
	"time"
)

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
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, &template, &template, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func main() {
	body := []byte(`{"item":7,"name":"widget","price":12.5}` + "\n")
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
	server := &http.Server{
		Addr:      "127.0.0.1:" + os.Args[1],
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{certificate()}},
	}
	if err := server.ListenAndServeTLS("", ""); err != nil {
		panic(err)
	}
}
