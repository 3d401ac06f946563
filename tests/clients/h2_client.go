// SPDX-License-Identifier: Apache-2.0
// An HTTP/2 client built on Go's standard library only (net/http over TLS, ALPN h2), for
// tests/integration/http2_clients_test.cc: the seed transcript, or fifty concurrent requests
// with one key on one connection. It prints one line per answer, "<status> <proto>
// <idempotent-replayed> <body>", and for the fifty, "conns=<n>" (distinct connections used).
// The test builds it with `go build` (no modules, nothing fetched).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "", "https://host:port/v1/payment_intents")
	caFile := flag.String("ca", "", "the test CA's PEM")
	mode := flag.String("mode", "seed", "seed or fifty")
	key := flag.String("key", "go-1", "the Idempotency-Key")
	flag.Parse()
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	// A custom TLS config turns HTTP/2 off unless asked for.
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
	}
	client := &http.Client{Transport: transport, Timeout: 20 * time.Second}
	switch *mode {
	case "seed":
		for _, body := range []string{`{"amount":"100000000"}`, `{"amount":"100000000"}`,
			`{"amount":"999000000"}`} {
			fmt.Println(post(client, *url, *key, body, nil))
		}
	case "fifty":
		fifty(client, *url, *key)
	}
}

// One POST with the key; its answer as one line.
func post(client *http.Client, url, key, body string, trace *httptrace.ClientTrace) string {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return "error: " + err.Error()
	}
	if trace != nil {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	}
	req.Header.Set("Authorization", "Bearer merchant-demo")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	replayed := resp.Header.Get("Idempotent-Replayed")
	if replayed == "" {
		replayed = "-"
	}
	return fmt.Sprintf("%d %s %s %s", resp.StatusCode, resp.Proto, replayed, string(data))
}

// A first request opens the connection (concurrent first requests could each dial one); then
// fifty at once with one key, each on that connection as its own stream.
func fifty(client *http.Client, url, key string) {
	warm, err := client.Get(strings.Replace(url, "/v1/payment_intents", "/warm-up", 1))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	io.Copy(io.Discard, warm.Body)
	warm.Body.Close()
	var mu sync.Mutex
	conns := map[string]bool{}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		mu.Lock()
		conns[info.Conn.LocalAddr().String()] = true
		mu.Unlock()
	}}
	lines := make([]string, 50)
	var wg sync.WaitGroup
	for i := range lines {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			lines[i] = post(client, url, key, `{"amount":"100000000"}`, trace)
		}(i)
	}
	wg.Wait()
	for _, line := range lines {
		fmt.Println(line)
	}
	fmt.Printf("conns=%d\n", len(conns))
}
