package deploytest

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/cellgate/cellgate/internal/kube"
)

var docSeparator = regexp.MustCompile(`(?m)^---\n`)

// TestKubectlKustomize is the acceptance check with the tool users run:
// `kubectl kustomize` on every cell's overlay and the router's yields a
// Deployment with a /readyz readiness probe, a Service, a
// PodDisruptionBudget and a ConfigMap, each decoding strictly.
func TestKubectlKustomize(t *testing.T) {
	kubectl := tool(t, "kubectl", "kubectl")
	for _, tr := range trees {
		_, dirs := overlays(t, tr)
		dirs = append(dirs, filepath.Join(tr.gen, kube.Dir, kube.BaseDir))
		for _, dir := range dirs {
			out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
			}
			kinds := map[string]int{}
			readyz := false
			for _, doc := range docSeparator.Split(string(out), -1) {
				if len(bytes.TrimSpace([]byte(doc))) == 0 {
					continue
				}
				o, err := decodeObject([]byte(doc))
				if err != nil {
					t.Fatalf("kubectl kustomize %s: %v", dir, err)
				}
				kinds[o.kind]++
				if d, ok := o.obj.(*appsv1.Deployment); ok {
					for _, c := range d.Spec.Template.Spec.Containers {
						if p := c.ReadinessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path == "/readyz" {
							readyz = true
						}
					}
				}
			}
			if filepath.Base(dir) == kube.BaseDir {
				if kinds["Namespace"] != 1 || kinds["NetworkPolicy"] != 1 {
					t.Errorf("kubectl kustomize %s: %v", dir, kinds)
				}
				continue
			}
			for _, k := range []string{"Deployment", "Service", "PodDisruptionBudget", "ConfigMap"} {
				if kinds[k] != 1 {
					t.Errorf("kubectl kustomize %s: %d %s, want 1 (%v)", dir, kinds[k], k, kinds)
				}
			}
			if !readyz {
				t.Errorf("kubectl kustomize %s: no Deployment with a /readyz readiness probe", dir)
			}
		}
	}
}
