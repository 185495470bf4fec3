package runtime

import (
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
)

// benchHead is a typical API request head (about 300 bytes).
var benchHead = []byte("POST /orders HTTP/1.1\r\nHost: cell-1.internal:8080\r\nUser-Agent: Go-http-client/1.1\r\n" +
	"Content-Length: 42\r\nContent-Type: application/json\r\nX-Request-Id: 5f2dd03621d4f9da-1\r\n" +
	"X-Tenant-ID: acme\r\nAccept-Encoding: gzip\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n" +
	`{"account_id":1,"amount_cents":100,"note":""}`)

// BenchmarkHeadScan is the scan every request head pays: no allocation.
func BenchmarkHeadScan(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchHead)))
	for b.Loop() {
		var s headScan
		s.feed(benchHead)
		if s.verdict() != headOK {
			b.Fatal("verdict")
		}
	}
}

// BenchmarkKeepAliveRequest is one keep-alive GET over loopback through
// net/http alone and through the guarded listener (head deadline, scan,
// verdict lookup): compare the two sub-benchmarks of one run.
func BenchmarkKeepAliveRequest(b *testing.B) {
	s, err := New(testConfig(), Options{Logger: discardLogger(), Registry: newRegistry(), Getenv: func(string) string { return "" }})
	if err != nil {
		b.Fatal(err)
	}
	s.Public("GET", "/ok", func(c echo.Context) error { return c.String(200, "ok") })
	for _, guarded := range []bool{false, true} {
		name := "net-http"
		if guarded {
			name = "guarded"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: s.Echo()}
			if guarded {
				ln = guardedListener{Listener: ln, headerTimeout: s.cfg.Server.ReadHeaderTimeout.D()}
				srv.ConnState, srv.ConnContext = trackConnState, connContext
			}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			url := "http://" + ln.Addr().String() + "/ok"
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
