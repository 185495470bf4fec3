package router

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellgate/cellgate/internal/config"
)

// TestExtractorJWKSURLReportsAndCloses: the router's extractor for a JWKS
// URL key set reports its key set in the router's registry, as the cells'
// does, and is a Closer, so Run can end its background refresh.
func TestExtractorJWKSURLReportsAndCloses(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	doc, err := json.Marshal(map[string]any{"keys": []map[string]any{{
		"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(doc) }))
	defer idp.Close()

	tn := headerTenancy()
	tn.Source = "jwt"
	tn.JWT = config.JWTSource{
		Algorithms: []string{"RS256"}, Claim: "tenant", JWKSURL: idp.URL,
		JWKSRefresh: config.Duration(time.Hour), JWKSUnknownKIDInterval: config.Duration(10 * time.Second),
		JWKSTimeout: config.Duration(5 * time.Second),
	}
	reg := prometheus.NewRegistry()
	x, err := Extractor(tn, os.Getenv, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := x.(io.Closer)
	if !ok {
		t.Fatal("a JWKS URL extractor is not an io.Closer: Run could not stop its refresh")
	}
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, ok := gaugeValue(t, reg, "cellgate_tenancy_jwks_keys"); ok && v == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("cellgate_tenancy_jwks_keys is not 1 in the router's registry")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gaugeValue returns the value of the gauge name in reg, if registered.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}
