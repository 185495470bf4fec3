package deploytest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	ktypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/kube"
	"github.com/cellgate/cellgate/schema/specload"
)

// tree is one generated output and the spec it came from: the repository's
// gen/ and the generator's golden "full" case (two cells, four shards).
type tree struct {
	name, spec, gen string
}

var trees = []tree{
	{"gen", "../schema", "../gen"},
	{"full", "../cmd/generate/testdata/full/app.cue", "../cmd/generate/testdata/full/expected"},
}

// specOf loads a tree's spec with the same CUE definitions the generator
// uses; a test case directory holds its app.cue beside the definitions'
// copy the generator's tests make, so it is unified here the same way.
func specOf(tb testing.TB, tr tree) config.Config {
	tb.Helper()
	dir := tr.spec
	if strings.HasSuffix(dir, ".cue") {
		tmp := tb.TempDir()
		for src, dst := range map[string]string{dir: "app.cue", "../schema/cellgate.cue": "cellgate.cue"} {
			b, err := os.ReadFile(src)
			if err != nil {
				tb.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, dst), b, 0o644); err != nil {
				tb.Fatal(err)
			}
		}
		dir = tmp
	}
	raw, err := specload.Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var cfg config.Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// overlays are the kustomization directories the acceptance names: one per
// cell of the tree's slotmap.json, and the router's.
func overlays(tb testing.TB, tr tree) (cellNames []string, dirs []string) {
	tb.Helper()
	sm, _, err := cells.ReadSlotMap(filepath.Join(tr.gen, cells.DeployDir, cells.SlotMapFile))
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range sm.Cells {
		cellNames = append(cellNames, c.Name)
		dirs = append(dirs, filepath.Join(tr.gen, kube.Dir, c.Name))
	}
	return cellNames, append(dirs, filepath.Join(tr.gen, kube.Dir, kube.RouterName))
}

// strict decodes YAML into v, failing on a field v's type does not have.
func strict(data []byte, v any) error {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// object is one decoded manifest.
type object struct {
	kind, name string
	obj        any
}

// decodeObject reads kind and decodes the manifest strictly into its
// k8s.io/api type; a kind the generator should not emit fails.
func decodeObject(data []byte) (object, error) {
	var tm metav1.TypeMeta
	var meta struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return object{}, err
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return object{}, err
	}
	var v any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		v = &appsv1.Deployment{}
	case "v1 Service":
		v = &corev1.Service{}
	case "v1 ConfigMap":
		v = &corev1.ConfigMap{}
	case "v1 Namespace":
		v = &corev1.Namespace{}
	case "policy/v1 PodDisruptionBudget":
		v = &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1 NetworkPolicy":
		v = &networkingv1.NetworkPolicy{}
	default:
		return object{}, fmt.Errorf("unexpected %s %s", tm.APIVersion, tm.Kind)
	}
	if err := strict(data, v); err != nil {
		return object{}, fmt.Errorf("%s %s: %w", tm.Kind, meta.Metadata.Name, err)
	}
	return object{tm.Kind, meta.Metadata.Name, v}, nil
}

// TestManifestsDecodeStrictly decodes every generated file: manifests into
// their k8s.io/api types, kustomization.yaml into kustomize's type.
func TestManifestsDecodeStrictly(t *testing.T) {
	for _, tr := range trees {
		root := filepath.Join(tr.gen, kube.Dir)
		n := 0
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !bytes.HasPrefix(data, []byte(kube.Header)) {
				t.Errorf("%s: does not start with %q", path, kube.Header)
			}
			n++
			if d.Name() == "kustomization.yaml" {
				var k ktypes.Kustomization
				if err := strict(data, &k); err != nil {
					t.Errorf("%s: %v", path, err)
				}
				return nil
			}
			if _, err := decodeObject(data); err != nil {
				t.Errorf("%s: %v", path, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n < 15 {
			t.Fatalf("%s: only %d files under %s", tr.name, n, root)
		}
	}
}

// TestStrictDecodingRejectsUnknownFields proves the check above can fail.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	bad := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replicaz: 2\n"
	if _, err := decodeObject([]byte(bad)); err == nil || !strings.Contains(err.Error(), "replicaz") {
		t.Fatalf("err = %v, want an unknown field error naming replicaz", err)
	}
}

// build runs kustomize's Go API on one directory and decodes the output.
func build(tb testing.TB, dir string) []object {
	tb.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		tb.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []object
	for _, r := range rm.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			tb.Fatal(err)
		}
		o, err := decodeObject(b)
		if err != nil {
			tb.Fatalf("%s: %v", dir, err)
		}
		out = append(out, o)
	}
	return out
}

// TestOverlaysBuildAndHoldInvariants builds the base and every overlay with
// krusty and checks what a cluster would otherwise find out the hard way.
func TestOverlaysBuildAndHoldInvariants(t *testing.T) {
	for _, tr := range trees {
		t.Run(tr.name, func(t *testing.T) {
			cfg := specOf(t, tr)
			if base := build(t, filepath.Join(tr.gen, kube.Dir, kube.BaseDir)); len(base) != 2 {
				t.Errorf("base: %d objects, want the namespace and its policy", len(base))
			}
			cellNames, dirs := overlays(t, tr)
			if len(cellNames) != len(cfg.Cells) {
				t.Fatalf("slotmap.json has %d cells, the spec %d", len(cellNames), len(cfg.Cells))
			}
			for i, dir := range dirs {
				cell := ""
				if i < len(cellNames) {
					cell = cellNames[i]
				}
				checkOverlay(t, tr, cfg, cell, build(t, dir))
			}
		})
	}
}

func checkOverlay(t *testing.T, tr tree, cfg config.Config, cell string, objs []object) {
	t.Helper()
	byKind := map[string][]object{}
	for _, o := range objs {
		byKind[o.kind] = append(byKind[o.kind], o)
		for _, e := range validation.IsDNS1123Label(o.name) {
			t.Errorf("%s %s: name: %s", o.kind, o.name, e)
		}
	}
	for _, k := range []string{"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "NetworkPolicy"} {
		if len(byKind[k]) != 1 {
			t.Fatalf("overlay of %q: %d %s objects, want 1", cell, len(byKind[k]), k)
		}
	}
	dep := byKind["Deployment"][0].obj.(*appsv1.Deployment)
	svc := byKind["Service"][0].obj.(*corev1.Service)
	pdb := byKind["PodDisruptionBudget"][0].obj.(*policyv1.PodDisruptionBudget)
	cm := byKind["ConfigMap"][0].obj.(*corev1.ConfigMap)
	np := byKind["NetworkPolicy"][0].obj.(*networkingv1.NetworkPolicy)
	pod := dep.Spec.Template
	name := dep.Name

	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("%s: selector %v: %v", name, dep.Spec.Selector, err)
	}
	matches := func(what string, s *metav1.LabelSelector) {
		ls, err := metav1.LabelSelectorAsSelector(s)
		if err != nil || ls.Empty() || !ls.Matches(labels.Set(pod.Labels)) {
			t.Errorf("%s: %s selector %v does not select the pods (%v)", name, what, s, pod.Labels)
		}
	}
	matches("Deployment", dep.Spec.Selector)
	matches("PodDisruptionBudget", pdb.Spec.Selector)
	matches("NetworkPolicy", &np.Spec.PodSelector)
	matches("Service", &metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
	for _, c := range pod.Spec.TopologySpreadConstraints {
		matches("topology spread", c.LabelSelector)
	}

	replicas := int(*dep.Spec.Replicas)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() >= replicas {
		t.Errorf("%s: PDB minAvailable %v with %d replicas leaves no pod evictable", name, pdb.Spec.MinAvailable, replicas)
	}
	if cell == "" && len(cfg.Cells) > 1 && replicas < 2 {
		t.Errorf("router: %d replicas for %d cells", replicas, len(cfg.Cells))
	}

	// Grace: the kubelet must wait for the preStop sleep, the server's
	// drain and the jobs' drain before it kills.
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", name, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("%s: no preStop sleep", name)
	}
	pre := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	if need := pre + cfg.Server.ShutdownTimeout.D() + cfg.Jobs.ShutdownTimeout.D(); grace <= need || grace <= cfg.Server.ShutdownTimeout.D() {
		t.Errorf("%s: terminationGracePeriodSeconds %s is not above preStop + server.shutdown_timeout + jobs.shutdown_timeout (%s)", name, grace, need)
	}

	// Probes: startup and liveness on /healthz, readiness on /readyz, all
	// on the container's named port.
	for what, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := "/healthz"
		if what == "readiness" {
			want = "/readyz"
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s: %s probe %+v, want GET %s on port http", name, what, p, want)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("%s: ports %+v / service %+v", name, c.Ports, svc.Spec.Ports)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: container must run as non-root on a read-only root filesystem: %+v", name, sc)
	}
	if c.Image != cfg.Deploy.Image {
		t.Errorf("%s: image %q, the spec says %q", name, c.Image, cfg.Deploy.Image)
	}
	for _, e := range c.Env {
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil && e.ValueFrom.ResourceFieldRef == nil {
			t.Errorf("%s: env %s must come from a Secret reference, never a value", name, e.Name)
		}
	}

	// The mounted ConfigMap and the checksum that rolls the pods.
	var mounted string
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil {
			mounted = v.ConfigMap.Name
		}
	}
	if mounted != cm.Name {
		t.Errorf("%s: mounts ConfigMap %q, the overlay has %q", name, mounted, cm.Name)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("%s: ConfigMap has %d files", cm.Name, len(cm.Data))
	}
	var data string
	for _, d := range cm.Data {
		data = d
	}
	sum := sha256.Sum256([]byte(data))
	if got := pod.Annotations[kube.AnnotationConfigChecksum]; got != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("%s: checksum annotation %q does not match the ConfigMap", name, got)
	}

	if cell != "" {
		checkCell(t, tr, cfg, cell, c, cm, np)
	} else {
		checkRouter(t, tr, cfg, cm)
	}
}

func checkCell(t *testing.T, tr tree, cfg config.Config, cell string, c corev1.Container, cm *corev1.ConfigMap, np *networkingv1.NetworkPolicy) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(tr.gen, cells.DeployDir, cell+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data[kube.CellConfigFile]; got != string(want) {
		t.Errorf("%s: ConfigMap %s differs from gen/deploy/%s.json", cell, kube.CellConfigFile, cell)
	}
	// Every DSN the cell opens comes from its own Secret.
	shards, err := cells.ShardsOf(cfg, cell)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name
		}
	}
	need := []string{cfg.Database.Control.DSNEnv}
	for _, s := range shards {
		need = append(need, s.DSNEnv)
	}
	for _, v := range need {
		if refs[v] != kube.CellSecret(cell) {
			t.Errorf("%s: %s comes from %q, want Secret %q", cell, v, refs[v], kube.CellSecret(cell))
		}
	}
	// Ingress: only the router's pods and the monitoring namespace.
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 2 {
		t.Fatalf("%s: NetworkPolicy ingress %+v", cell, np.Spec.Ingress)
	}
	for _, peer := range np.Spec.Ingress[0].From {
		switch {
		case peer.PodSelector != nil && peer.NamespaceSelector == nil:
			if peer.PodSelector.MatchLabels[kube.LabelComponent] != "router" {
				t.Errorf("%s: admits pods %v, not only the router", cell, peer.PodSelector.MatchLabels)
			}
		case peer.NamespaceSelector != nil && peer.PodSelector == nil:
			if peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != cfg.Deploy.MonitoringNamespace {
				t.Errorf("%s: admits namespaces %v, not only %s", cell, peer.NamespaceSelector.MatchLabels, cfg.Deploy.MonitoringNamespace)
			}
		default:
			t.Errorf("%s: unexpected ingress peer %+v", cell, peer)
		}
	}
}

// checkRouter: the router's slot map is gen/deploy/slotmap.json with each
// cell's URL pointing at the cell's Service (same cells, order and slots).
func checkRouter(t *testing.T, tr tree, cfg config.Config, cm *corev1.ConfigMap) {
	t.Helper()
	want, _, err := cells.ReadSlotMap(filepath.Join(tr.gen, cells.DeployDir, cells.SlotMapFile))
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := cells.ParseSlotMap([]byte(cm.Data[cells.SlotMapFile]))
	if err != nil {
		t.Fatalf("router ConfigMap %s: %v", cells.SlotMapFile, err)
	}
	for i := range want.Cells {
		port, err := cells.Port(want.Cells[i].URL)
		if err != nil {
			t.Fatal(err)
		}
		want.Cells[i].URL = kube.ServiceURL(want.Cells[i].Name, cfg.Deploy.Namespace, port)
	}
	if !slices.EqualFunc(got.Cells, want.Cells, func(a, b cells.CellSpec) bool {
		return a.Name == b.Name && a.URL == b.URL && slices.Equal(a.Slots, b.Slots)
	}) || !slices.Equal(got.Frozen, want.Frozen) {
		t.Errorf("router slot map %+v, want gen/deploy/slotmap.json with Service URLs %+v", got, want)
	}
}
