package tenancy

import (
	"strings"
	"testing"
)

func TestSubdomainSource(t *testing.T) {
	x := newExtractorT(t, Config{Source: SourceSubdomain, BaseDomain: "Example.COM."})
	cases := []struct {
		host string
		id   string
		kind Kind
	}{
		{host: "acme.example.com", id: "acme"},
		{host: "acme.example.com:8443", id: "acme"},
		{host: "ACME.Example.Com", id: "acme"},
		{host: "Acme-01.EXAMPLE.COM:80", id: "acme-01"},
		{host: "acme.example.com.", id: "acme"},
		{host: "acme.example.com.:443", id: "acme"},
		{host: "a_b.example.com", id: "a_b"},
		{host: strings.Repeat("a", 64) + ".example.com", id: strings.Repeat("a", 64)},

		{host: "example.com", kind: KindMissing},
		{host: "example.com:8080", kind: KindMissing},
		{host: ".example.com", kind: KindMissing},
		{host: "a.b.example.com", kind: KindMissing},
		{host: "acmeexample.com", kind: KindMissing},
		{host: "acme.example.org", kind: KindMissing},
		{host: "acme.example.com.evil.net", kind: KindMissing},
		{host: "", kind: KindMissing},
		{host: ":443", kind: KindMissing},
		{host: "[::1]:443", kind: KindMissing},
		{host: "[::1]", kind: KindMissing},
		{host: "10.0.0.1", kind: KindMissing},

		{host: strings.Repeat("a", 65) + ".example.com", kind: KindInvalid},
		{host: "ac%me.example.com", kind: KindInvalid},
		{host: "ac me.example.com", kind: KindInvalid},
		{host: "ácme.example.com", kind: KindInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			r := newRequest(t)
			r.Host = tc.host
			id, err := x.Extract(r)
			if tc.kind != 0 {
				wantKind(t, id, err, tc.kind)
				return
			}
			wantID(t, id, err, tc.id)
		})
	}
}

func TestSubdomainMultiLabelBase(t *testing.T) {
	x := newExtractorT(t, Config{Source: SourceSubdomain, BaseDomain: "eu.apps.example.com"})
	r := newRequest(t)
	r.Host = "acme.eu.apps.example.com"
	id, err := x.Extract(r)
	wantID(t, id, err, "acme")
	r.Host = "acme.us.apps.example.com"
	id, err = x.Extract(r)
	wantKind(t, id, err, KindMissing)
}
