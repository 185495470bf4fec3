package schema

import (
	"strings"
	"testing"
)

func TestLoadTheAppSpec(t *testing.T) {
	raw, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(raw); err != nil {
		t.Fatalf("the exported app spec does not pass Check: %v", err)
	}
}

func TestCheckNamesThePath(t *testing.T) {
	raw, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(raw), `"workers":4`, `"workers":0`, 1)
	if bad == string(raw) {
		t.Fatal(`fixture: the app spec no longer has "workers":4`)
	}
	err = Check([]byte(bad))
	if err == nil || !strings.Contains(err.Error(), "jobs.workers") {
		t.Fatalf("err = %v, want one naming jobs.workers", err)
	}
}

func TestLoadReportsFileAndLine(t *testing.T) {
	_, err := Load(appDir(t, "package cellgate\n\nconfig: #Config & {\n\tserver: body_limit_bytes: 0\n\troutes: []\n}\n"))
	if err == nil || !strings.Contains(err.Error(), "server.body_limit_bytes") || !strings.Contains(err.Error(), "app.cue:4") {
		t.Fatalf("err = %v, want one naming server.body_limit_bytes at app.cue:4", err)
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no .cue files") {
		t.Fatalf("empty dir: %v", err)
	}
}
