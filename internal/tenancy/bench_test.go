package tenancy

import (
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// BenchmarkExtract measures each source against same-run baselines: the
// naive Header.Get of the tenant header, and the floor, a bare map index.
func BenchmarkExtract(b *testing.B) {
	headerReq := newRequest(b)
	headerReq.Header.Set(DefaultHeader, "acme-corp")
	hostReq := newRequest(b)
	hostReq.Host = "acme-corp.example.com:8443"
	sessionReq := cookieRequest(b, DefaultSessionCookie, SignSession(testSessionKey, "acme-corp", testNow.Add(time.Hour)))
	hsReq := bearerRequest(b, mint(b, jwt.SigningMethodHS256, testHMACKey, goodClaims("acme-corp")))
	esReq := bearerRequest(b, mint(b, jwt.SigningMethodES256, ecKeys()["P256"], goodClaims("acme-corp")))
	rsReq := bearerRequest(b, mint(b, jwt.SigningMethodRS256, rsaKeys()[0], goodClaims("acme-corp")))

	b.Run("baseline_HeaderGet", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			n += len(headerReq.Header.Get(DefaultHeader))
		}
		if n == 0 {
			b.Fatal("no header")
		}
	})
	// The floor: one map index with the canonical key, no validation.
	b.Run("baseline_HeaderIndex", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			n += len(headerReq.Header["X-Tenant-Id"])
		}
		if n == 0 {
			b.Fatal("no header")
		}
	})
	run := func(name string, x Extractor, r *http.Request) {
		b.Run(name, func(b *testing.B) {
			if _, err := x.Extract(r); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := x.Extract(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("header", newExtractorT(b, Config{}), headerReq)
	run("subdomain", newExtractorT(b, Config{Source: SourceSubdomain, BaseDomain: "example.com"}), hostReq)
	run("session", sessionExtractor(b), sessionReq)
	run("jwt_HS256", hsExtractor(b, nil), hsReq)
	run("jwt_ES256", esExtractor(b), esReq)
	run("jwt_RS256", rsExtractor(b), rsReq)

	b.Run("header_rejected", func(b *testing.B) {
		x := newExtractorT(b, Config{})
		r := newRequest(b)
		r.Header.Set(DefaultHeader, "ac me")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := x.Extract(r); err == nil {
				b.Fatal("accepted")
			}
		}
	})
}
