package tenancy

import (
	"strings"
	"testing"
)

func TestHeaderSource(t *testing.T) {
	x := newExtractorT(t, Config{Source: SourceHeader})
	cases := []struct {
		name   string
		values []string // nil: header absent
		id     string
		kind   Kind
	}{
		{name: "plain", values: []string{"acme"}, id: "acme"},
		{name: "full charset", values: []string{"Acme-Corp_01.eu"}, id: "Acme-Corp_01.eu"},
		{name: "case preserved", values: []string{"ACME"}, id: "ACME"},
		{name: "64 bytes", values: []string{strings.Repeat("a", 64)}, id: strings.Repeat("a", 64)},
		{name: "absent", values: nil, kind: KindMissing},
		{name: "empty", values: []string{""}, kind: KindMissing},
		{name: "65 bytes", values: []string{strings.Repeat("a", 65)}, kind: KindInvalid},
		{name: "space", values: []string{"ac me"}, kind: KindInvalid},
		{name: "padded", values: []string{" acme"}, kind: KindInvalid},
		{name: "slash", values: []string{"acme/other"}, kind: KindInvalid},
		{name: "comma list", values: []string{"acme,other"}, kind: KindInvalid},
		{name: "non-ascii", values: []string{"acmé"}, kind: KindInvalid},
		{name: "nul", values: []string{"ac\x00me"}, kind: KindInvalid},
		{name: "repeated", values: []string{"acme", "other"}, kind: KindInvalid},
		{name: "repeated same", values: []string{"acme", "acme"}, kind: KindInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRequest(t)
			for _, v := range tc.values {
				r.Header.Add("X-Tenant-ID", v)
			}
			id, err := x.Extract(r)
			if tc.kind != 0 {
				wantKind(t, id, err, tc.kind)
				return
			}
			wantID(t, id, err, tc.id)
		})
	}
}

func TestHeaderNameIsCaseInsensitive(t *testing.T) {
	x := newExtractorT(t, Config{Source: SourceHeader, Header: "x-org"})
	for _, name := range []string{"X-Org", "x-org", "X-ORG"} {
		r := newRequest(t)
		r.Header.Set(name, "acme") // net/http canonicalizes, as the server does
		id, err := x.Extract(r)
		wantID(t, id, err, "acme")
	}
	r := newRequest(t)
	r.Header.Set("X-Tenant-ID", "acme") // the default header no longer counts
	id, err := x.Extract(r)
	wantKind(t, id, err, KindMissing)
}

func TestMaxIDLengthConfigurable(t *testing.T) {
	x := newExtractorT(t, Config{MaxIDLength: 4})
	r := newRequest(t)
	r.Header.Set(DefaultHeader, "abcd")
	id, err := x.Extract(r)
	wantID(t, id, err, "abcd")
	r.Header.Set(DefaultHeader, "abcde")
	id, err = x.Extract(r)
	wantKind(t, id, err, KindInvalid)
}

func TestValidateID(t *testing.T) {
	for _, ok := range []string{"a", "A.b_c-9", strings.Repeat("z", 64)} {
		if err := ValidateID(ok, 0); err != nil {
			t.Errorf("ValidateID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("z", 65), "a b", "a:b", "ä", "a\n"} {
		id, err := "", ValidateID(bad, 0)
		wantKind(t, id, err, KindInvalid)
	}
	if err := ValidateID(strings.Repeat("z", 100), 100); err != nil {
		t.Errorf("ValidateID with maxLen 100: %v", err)
	}
}
