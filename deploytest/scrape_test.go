package deploytest

import (
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/kubernetes"
	"github.com/prometheus/prometheus/model/relabel"

	"github.com/cellgate/cellgate/internal/mixin"
)

// TestScrapeConfigLoads loads the generated Prometheus config with
// Prometheus' own loader (Debian's promtool is built without Kubernetes
// discovery, so `promtool check config` cannot): it must parse, watch
// deploy.namespace and copy the pod's cell label into `cell`, the label
// every rule groups by.
func TestScrapeConfigLoads(t *testing.T) {
	for _, tr := range trees {
		cfg := specOf(t, tr)
		path := filepath.Join(tr.gen, mixin.Dir, mixin.ScrapeFile)
		pc, err := config.LoadFile(path, false, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(pc.ScrapeConfigs) != 1 {
			t.Fatalf("%s: %d scrape configs", path, len(pc.ScrapeConfigs))
		}
		sc := pc.ScrapeConfigs[0]
		if len(sc.ServiceDiscoveryConfigs) != 1 {
			t.Fatalf("%s: %d discovery configs", path, len(sc.ServiceDiscoveryConfigs))
		}
		sd, ok := sc.ServiceDiscoveryConfigs[0].(*kubernetes.SDConfig)
		if !ok || sd.Role != kubernetes.RolePod || !slices.Equal(sd.NamespaceDiscovery.Names, []string{cfg.Deploy.Namespace}) {
			t.Errorf("%s: discovery %+v, want pods of namespace %s", path, sc.ServiceDiscoveryConfigs[0], cfg.Deploy.Namespace)
		}
		cell := false
		for _, r := range sc.RelabelConfigs {
			if r.Action == relabel.Replace && r.TargetLabel == "cell" && len(r.SourceLabels) == 1 && r.SourceLabels[0] == "__meta_kubernetes_pod_label_cellgate_dev_cell" {
				cell = true
			}
		}
		if !cell {
			t.Errorf("%s: no relabeling of the pod label cellgate.dev/cell into cell", path)
		}
		if len(pc.RuleFiles) != 1 || filepath.Base(pc.RuleFiles[0]) != filepath.Base(mixin.RulesFile) {
			t.Errorf("%s: rule_files %v", path, pc.RuleFiles)
		}
	}
}
