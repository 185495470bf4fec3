package runtime

import (
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/cellgate/cellgate/internal/httpguard"
)

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
				ln = httpguard.Listener{Listener: ln, HeaderTimeout: s.cfg.Server.ReadHeaderTimeout.D()}
				httpguard.Install(srv)
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
