// Package mixin renders cellgate's monitoring mixin: Prometheus recording
// and alerting rules, a Prometheus scrape config for the generated
// manifests, and Grafana dashboards (cells overview, tenants and
// bulkheads, jobs, router). cmd/generate writes them to
// gen/deploy/monitoring and drift-checks them like the rest of gen/.
//
// Files is pure and deterministic and safe for concurrent use; the rule and
// dashboard tables are read-only package data.
package mixin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/kube"
	"github.com/cellgate/cellgate/internal/probe"
)

// Dir is the mixin's directory relative to the output root.
const Dir = "deploy/monitoring"

// RulesFile and ScrapeFile are the Prometheus files inside Dir.
const (
	RulesFile  = "prometheus/cellgate-rules.yaml"
	ScrapeFile = "prometheus/prometheus.yaml"
)

// RunbookURL is where every alert's runbook_url points: the alert's
// section of docs/runbook.md (anchor: its name in lower case).
const RunbookURL = "docs/runbook.md"

// Runbook is the runbook_url of an alert.
func Runbook(alert string) string { return RunbookURL + "#" + strings.ToLower(alert) }

// Files renders the mixin of cfg under Dir, keyed by path.
func Files(cfg config.Config) (map[string][]byte, error) {
	files := map[string][]byte{}
	rules, err := rulesYAML()
	if err != nil {
		return nil, err
	}
	files[path.Join(Dir, RulesFile)] = rules
	scrape, err := scrapeYAML(cfg.Deploy)
	if err != nil {
		return nil, err
	}
	files[path.Join(Dir, ScrapeFile)] = scrape
	for _, d := range Dashboards() {
		b, err := dashboardJSON(d)
		if err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", d.UID, err)
		}
		files[path.Join(Dir, "grafana", d.UID+".json")] = b
	}
	return files, nil
}

func rulesYAML() ([]byte, error) {
	rec := make(kube.L, len(Recordings))
	for i, r := range Recordings {
		rec[i] = kube.M{"record": r.Record, "expr": r.Expr}
	}
	alerts := make(kube.L, len(Alerts))
	for i, a := range Alerts {
		if !strings.HasPrefix(a.Name, "Cellgate") {
			return nil, fmt.Errorf("alert %s: the name must start with Cellgate", a.Name)
		}
		alerts[i] = kube.M{
			"alert":  a.Name,
			"expr":   a.Expr,
			"for":    promDuration(a.For.Minutes()),
			"labels": kube.M{"severity": a.Severity},
			"annotations": kube.M{
				"summary":     a.Summary,
				"description": a.Description,
				"runbook_url": Runbook(a.Name),
			},
		}
	}
	// One group, recordings first: Prometheus evaluates a group's rules in
	// order, so every alert reads the recordings of the same evaluation
	// (two groups would run concurrently and read one interval late).
	return kube.YAML(kube.M{"groups": kube.L{
		kube.M{"name": "cellgate", "rules": append(rec, alerts...)},
	}})
}

func promDuration(minutes float64) string { return fmt.Sprintf("%gm", minutes) }

// scrapeYAML is a Prometheus config that scrapes the generated pods: it
// keeps the cells and the router of deploy.namespace, and copies the pod
// label cellgate.dev/cell into the label cell that the rules group by.
func scrapeYAML(d config.Deploy) ([]byte, error) {
	podLabel := func(l string) string {
		r := strings.NewReplacer(".", "_", "/", "_", "-", "_")
		return "__meta_kubernetes_pod_label_" + r.Replace(l)
	}
	return kube.YAML(kube.M{
		"global":     kube.M{"scrape_interval": "15s", "evaluation_interval": "15s"},
		"rule_files": kube.L{path.Base(RulesFile)},
		"scrape_configs": kube.L{kube.M{
			"job_name":     "cellgate",
			"metrics_path": probe.Metrics,
			"kubernetes_sd_configs": kube.L{kube.M{
				"role":       "pod",
				"namespaces": kube.M{"names": kube.L{d.Namespace}},
			}},
			"relabel_configs": kube.L{
				kube.M{"action": "keep", "source_labels": kube.L{podLabel(kube.LabelComponent)}, "regex": "cell|router"},
				kube.M{"action": "keep", "source_labels": kube.L{"__meta_kubernetes_pod_container_port_name"}, "regex": "http"},
				kube.M{"action": "replace", "source_labels": kube.L{podLabel(kube.LabelCell)}, "target_label": "cell"},
				kube.M{"action": "replace", "source_labels": kube.L{podLabel(kube.LabelComponent)}, "target_label": "component"},
				kube.M{"action": "replace", "source_labels": kube.L{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
				kube.M{"action": "replace", "source_labels": kube.L{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
			},
		}},
	})
}

func dashboardJSON(d Dashboard) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d.grafana()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
