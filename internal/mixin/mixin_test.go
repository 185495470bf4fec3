package mixin

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/cellgate/cellgate/gen/spec"
)

// TestEveryAlertHasARunbookSection keeps docs/runbook.md and the alerts
// together: each alert's runbook_url anchor is a heading there.
func TestEveryAlertHasARunbookSection(t *testing.T) {
	doc, err := os.ReadFile("../../" + RunbookURL)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)`).FindAllStringSubmatch(string(doc), -1) {
		headings[strings.ToLower(m[1])] = true
	}
	for _, a := range Alerts {
		if !headings[strings.ToLower(a.Name)] {
			t.Errorf("%s: no \"## %s\" section in %s", a.Name, a.Name, RunbookURL)
		}
		if a.Severity != "critical" && a.Severity != "warning" {
			t.Errorf("%s: severity %q", a.Name, a.Severity)
		}
		if a.Summary == "" || a.Description == "" || a.For <= 0 {
			t.Errorf("%s: summary, description and for are required", a.Name)
		}
	}
}

func TestFilesDeterministic(t *testing.T) {
	a, err := Files(spec.Config())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Files(spec.Config())
	if err != nil {
		t.Fatal(err)
	}
	for n := range a {
		if string(a[n]) != string(b[n]) {
			t.Fatalf("%s differs between two renderings", n)
		}
	}
	if len(a) != 2+len(Dashboards()) {
		t.Fatalf("%d files", len(a))
	}
}
