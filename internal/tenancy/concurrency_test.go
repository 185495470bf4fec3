package tenancy

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestConcurrentUse backs the package's concurrency contract: one Extractor
// serves many goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	tok := mint(t, jwt.SigningMethodHS256, testHMACKey, goodClaims("acme"))
	cookie := SignSession(testSessionKey, "acme", testNow.Add(time.Hour))
	extractors := []struct {
		x   Extractor
		req func() *http.Request
	}{
		{hsExtractor(t, nil), func() *http.Request { return bearerRequest(t, tok) }},
		{sessionExtractor(t), func() *http.Request { return cookieRequest(t, DefaultSessionCookie, cookie) }},
		{newExtractorT(t, Config{Source: SourceSubdomain, BaseDomain: "example.com"}), func() *http.Request {
			r := newRequest(t)
			r.Host = "ACME.example.com"
			return r
		}},
	}
	done := make(chan string, 8)
	for range 8 {
		go func() {
			for range 50 {
				for _, ex := range extractors {
					if id, err := ex.x.Extract(ex.req()); err != nil || id != "acme" {
						done <- fmt.Sprintf("got (%q, %v)", id, err)
						return
					}
				}
			}
			done <- ""
		}()
	}
	for range 8 {
		if msg := <-done; msg != "" {
			t.Fatal(msg)
		}
	}
}
