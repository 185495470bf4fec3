package kube

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
)

func TestYAMLIsSortedQuotedAndBlocksMultiline(t *testing.T) {
	got, err := YAML(M{
		"b":    L{M{"y": 1, "x": "on"}, "s", L{}},
		"a":    M{},
		"yes":  true,
		"text": "{\n  \"k\": 1\n}\n",
	}, M{"k": 2.5})
	if err != nil {
		t.Fatal(err)
	}
	want := Header + `a: {}
b:
- x: "on"
  "y": 1
- "s"
- []
text: |
  {
    "k": 1
  }
"yes": true
---
k: 2.5
`
	if string(got) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestYAMLRefusesUnknownTypes(t *testing.T) {
	if _, err := YAML(M{"x": struct{}{}}); err == nil || !strings.Contains(err.Error(), "x: unsupported YAML value") {
		t.Fatalf("err = %v", err)
	}
}

func TestFilesDeterministic(t *testing.T) {
	a, err := Files(spec.Config())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b, err := Files(spec.Config())
		if err != nil {
			t.Fatal(err)
		}
		if len(a) != len(b) {
			t.Fatalf("%d files, then %d", len(a), len(b))
		}
		for n := range a {
			if !bytes.Equal(a[n], b[n]) {
				t.Fatalf("%s differs between two renderings", n)
			}
		}
	}
}

func TestFilesNameSecretsNeverValues(t *testing.T) {
	files, err := Files(spec.Config())
	if err != nil {
		t.Fatal(err)
	}
	for n, b := range files {
		if bytes.Contains(b, []byte("postgres://")) || bytes.Contains(b, []byte("kind: \"Secret\"")) {
			t.Errorf("%s holds a secret value or a Secret object", n)
		}
	}
}
