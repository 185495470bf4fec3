package deploytest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/cellgate/cellgate/internal/mixin"
)

// rulesFile is the generated rule file of each tree.
func rulesFile(tr tree) string { return filepath.Join(tr.gen, mixin.Dir, mixin.RulesFile) }

const unitTests = "testdata/cellgate-rules_test.yaml"

// promql is Prometheus' parser with its default functions.
var promql = parser.NewParser(parser.Options{})

// TestPromtoolCheckRules runs `promtool check rules` on every rule file.
func TestPromtoolCheckRules(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	for _, tr := range trees {
		if out, err := exec.Command(promtool, "check", "rules", rulesFile(tr)).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules %s: %v\n%s", rulesFile(tr), err, out)
		}
	}
}

// TestPromtoolTestRules runs the unit tests with synthetic series.
func TestPromtoolTestRules(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	if out, err := exec.Command(promtool, "test", "rules", unitTests).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", unitTests, err, out)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(tb testing.TB, path string) ruleFile {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return rf
}

// TestEveryAlertIsTested holds the unit tests to the rule file: every alert
// of the generated file has a case in which it fires and one in which it
// stays quiet, and each one carries severity, summary, description and a
// runbook link.
func TestEveryAlertIsTested(t *testing.T) {
	b, err := os.ReadFile(unitTests)
	if err != nil {
		t.Fatal(err)
	}
	var ut struct {
		Tests []struct {
			Name  string `json:"name"`
			Cases []struct {
				Alert string `json:"alertname"`
				Exp   []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &ut); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, g := range ut.Tests {
		for _, c := range g.Cases {
			if len(c.Exp) > 0 {
				fires[c.Alert] = true
			} else {
				quiet[c.Alert] = true
			}
		}
	}
	n := 0
	for _, g := range readRules(t, rulesFile(trees[0])).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !strings.HasPrefix(r.Alert, "Cellgate") {
				t.Errorf("%s: no Cellgate prefix", r.Alert)
			}
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("%s: a case that fires: %v, one that does not: %v (%s)", r.Alert, fires[r.Alert], quiet[r.Alert], unitTests)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s: no severity label", r.Alert)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if !strings.HasPrefix(r.Annotations["runbook_url"], "docs/runbook.md#") {
				t.Errorf("%s: runbook_url %q does not point into docs/runbook.md", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}
	if n != len(mixin.Alerts) || n < 8 {
		t.Fatalf("%d alerts in the rule file, %d in internal/mixin", n, len(mixin.Alerts))
	}
}

// TestPromQLParses parses every rule expression and every dashboard
// target with Prometheus' own parser ($cell is Grafana's variable).
func TestPromQLParses(t *testing.T) {
	for _, tr := range trees {
		for _, g := range readRules(t, rulesFile(tr)).Groups {
			for _, r := range g.Rules {
				if _, err := promql.ParseExpr(r.Expr); err != nil {
					t.Errorf("%s %s%s: %v", rulesFile(tr), r.Alert, r.Record, err)
				}
			}
		}
		dashboards, err := filepath.Glob(filepath.Join(tr.gen, mixin.Dir, "grafana", "*.json"))
		if err != nil || len(dashboards) < 4 {
			t.Fatalf("%s: dashboards %v: %v", tr.name, dashboards, err)
		}
		for _, path := range dashboards {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var d struct {
				UID    string `json:"uid"`
				Panels []struct {
					Title   string `json:"title"`
					Targets []struct {
						Expr string `json:"expr"`
					} `json:"targets"`
				} `json:"panels"`
			}
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if len(d.Panels) == 0 {
				t.Errorf("%s: no panels", path)
			}
			for _, p := range d.Panels {
				if len(p.Targets) == 0 {
					t.Errorf("%s: panel %q has no query", path, p.Title)
				}
				for _, q := range p.Targets {
					if _, err := promql.ParseExpr(strings.ReplaceAll(q.Expr, "$cell", ".*")); err != nil {
						t.Errorf("%s: panel %q: %q: %v", path, p.Title, q.Expr, err)
					}
				}
			}
		}
	}
}

// TestPromQLParserRejectsBadExpressions proves the parse check can fail.
func TestPromQLParserRejectsBadExpressions(t *testing.T) {
	if _, err := promql.ParseExpr(`sum by (cell) (rate(cellgate_http_requests_total[5m])`); err == nil {
		t.Fatal("an unbalanced expression parsed")
	}
}
