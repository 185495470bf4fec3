// Package kube renders a spec's Kubernetes manifests: a kustomize base (the
// namespace and its default-deny ingress policy) and one kustomization per
// cell and one for the router, each a Deployment, Service,
// PodDisruptionBudget, ConfigMap and NetworkPolicy. cmd/generate writes them
// to gen/deploy/kubernetes and drift-checks them like the rest of gen/.
//
// Files is pure and deterministic (the same config gives the same bytes) and
// safe to call from many goroutines. The manifests name Secrets and the keys
// in them, never values: DSNs and tokens stay in the cluster's Secrets.
package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellgate/cellgate/internal/cells"
	"github.com/cellgate/cellgate/internal/config"
	"github.com/cellgate/cellgate/internal/probe"
)

// Dir is the directory, relative to the output root, of the manifests.
const Dir = cells.DeployDir + "/kubernetes"

// BaseDir, RouterName and the cell names are the kustomization directories
// inside Dir.
const (
	BaseDir    = "base"
	RouterName = "router"
)

// Paths inside the containers.
const (
	// ServerBinary and RouterBinary are where the image holds the
	// binaries (the image has no shell and no PATH lookup is relied on).
	ServerBinary = "/usr/local/bin/server"
	RouterBinary = "/usr/local/bin/router"
	// ConfigDir is where the ConfigMap is mounted.
	ConfigDir = "/etc/cellgate"
	// CellConfigFile is the cell's config file inside its ConfigMap.
	CellConfigFile = "cell.json"
)

// Label keys the manifests set; selectors use LabelName, LabelComponent
// and LabelCell only (stable across changes of deploy.labels).
const (
	LabelName      = "app.kubernetes.io/name"
	LabelComponent = "app.kubernetes.io/component"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelPartOf    = "app.kubernetes.io/part-of"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelCell      = "cellgate.dev/cell"
	// AnnotationConfigChecksum is the pod annotation holding the sha256 of
	// the mounted ConfigMap's data: a change rolls the Deployment.
	AnnotationConfigChecksum = "cellgate.dev/config-checksum"
)

// SharedSecret is the Secret holding what the cells and the router share
// (the admin token, the tenancy key); each cell's own DSNs are in
// CellSecret(cell).
const SharedSecret = "shared-secrets"

// CellSecret names the Secret holding a cell's DSNs.
func CellSecret(cell string) string { return cell + "-secrets" }

// CellConfigMap names the ConfigMap holding a cell's config file.
func CellConfigMap(cell string) string { return cell + "-config" }

// RouterConfigMap is the ConfigMap holding the router's slot map.
const RouterConfigMap = "router-slotmap"

// ServiceURL is the in-cluster URL the router dials for a cell: its
// Service's DNS name and the port of the spec's cell URL.
func ServiceURL(cell, namespace string, port int) string {
	return fmt.Sprintf("http://%s.%s.svc:%d", cell, namespace, port)
}

// Files renders every manifest of cfg under Dir, keyed by path.
func Files(cfg config.Config) (map[string][]byte, error) {
	deploy, err := cells.DeployFiles(cfg)
	if err != nil {
		return nil, err
	}
	r := renderer{cfg: cfg, d: cfg.Deploy, files: map[string][]byte{}}
	if err := r.base(); err != nil {
		return nil, err
	}
	routed := make([]cells.CellSpec, len(cfg.Cells))
	for i, c := range cfg.Cells {
		port, err := cells.Port(c.URL)
		if err != nil {
			return nil, fmt.Errorf("cells[%d] (%s).url: %w", i, c.Name, err)
		}
		routed[i] = cells.CellSpec{Name: c.Name, URL: ServiceURL(c.Name, r.d.Namespace, port), Slots: c.Slots}
		shards, err := cells.ShardsOf(cfg, c.Name)
		if err != nil {
			return nil, err
		}
		if err := r.cell(c.Name, port, deploy[cells.DeployDir+"/"+c.Name+".json"], shards); err != nil {
			return nil, fmt.Errorf("cell %s: %w", c.Name, err)
		}
	}
	cr, err := cells.New(routed)
	if err != nil {
		return nil, err
	}
	if err := r.router(cr.SlotMap().Marshal()); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return r.files, nil
}

type renderer struct {
	cfg   config.Config
	d     config.Deploy
	files map[string][]byte
}

func (r *renderer) put(dir, name string, docs ...M) error {
	b, err := YAML(docs...)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", dir, name, err)
	}
	r.files[path.Join(Dir, dir, name)] = b
	return nil
}

// kustomization writes dir/kustomization.yaml listing resources.
func (r *renderer) kustomization(dir string, resources ...string) error {
	rs := make(L, len(resources))
	for i, s := range resources {
		rs[i] = s
	}
	return r.put(dir, "kustomization.yaml", M{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"namespace":  r.d.Namespace,
		"resources":  rs,
	})
}

func (r *renderer) base() error {
	if err := r.put(BaseDir, "namespace.yaml", M{
		"apiVersion": "v1",
		"kind":       "Namespace",
		"metadata":   M{"name": r.d.Namespace, "labels": r.labels("namespace", "")},
	}); err != nil {
		return err
	}
	// Nothing reaches a pod of the namespace unless a policy of its own
	// admits it: the cells' policies admit the router and monitoring only.
	if err := r.put(BaseDir, "networkpolicy.yaml", M{
		"apiVersion": "networking.k8s.io/v1",
		"kind":       "NetworkPolicy",
		"metadata":   r.meta("default-deny-ingress", "namespace", ""),
		"spec": M{
			"podSelector": M{},
			"policyTypes": L{"Ingress"},
		},
	}); err != nil {
		return err
	}
	return r.kustomization(BaseDir, "namespace.yaml", "networkpolicy.yaml")
}

// labels are every object's labels: the selector labels, the common ones
// and deploy.labels (which cannot override the generator's own).
func (r *renderer) labels(component, cell string) M {
	l := M{}
	for k, v := range r.d.Labels {
		l[k] = v
	}
	maps.Copy(l, r.selector(component, cell))
	l[LabelPartOf] = "cellgate"
	l[LabelManagedBy] = "cellgate-generate"
	if cell != "" {
		l[LabelInstance] = cell
	} else {
		l[LabelInstance] = component
	}
	return l
}

// selector labels pick one Deployment's pods.
func (r *renderer) selector(component, cell string) M {
	s := M{LabelName: r.cfg.Service.Name, LabelComponent: component}
	if cell != "" {
		s[LabelCell] = cell
	}
	return s
}

func (r *renderer) meta(name, component, cell string) M {
	return M{"name": name, "namespace": r.d.Namespace, "labels": r.labels(component, cell)}
}

func (r *renderer) cell(name string, port int, cellJSON []byte, shards []config.Shard) error {
	if cellJSON == nil {
		return fmt.Errorf("no %s/%s.json", cells.DeployDir, name)
	}
	sel := r.selector("cell", name)
	// Each cell's databases are its own: the Secret of the cell holds its
	// control DSN and its shards' DSNs under the spec's variable names.
	var env L
	db := []string{r.cfg.Database.Control.DSNEnv}
	for _, s := range shards {
		db = append(db, s.DSNEnv)
	}
	for _, v := range uniqueSorted(db) {
		env = append(env, secretEnv(v, CellSecret(name)))
	}
	for _, v := range r.sharedEnv(true) {
		env = append(env, secretEnv(v, SharedSecret))
	}
	container := r.container("server", ServerBinary,
		L{"serve", "-config", ConfigDir + "/" + CellConfigFile}, port, env, r.d.Cells.Resources)
	docs := map[string]M{
		"deployment.yaml": r.deployment(name, "cell", name, r.d.Cells, container, CellConfigMap(name), cellJSON),
		"service.yaml":    r.service(name, "cell", name, sel, port),
		"pdb.yaml":        r.pdb(name, "cell", name, sel, r.d.Cells.MinAvailable),
		"configmap.yaml":  r.configMap(CellConfigMap(name), "cell", name, CellConfigFile, cellJSON),
		"networkpolicy.yaml": r.networkPolicy(name, "cell", name, sel, port, L{
			// Only the router's pods and the monitoring namespace:
			// no cell reaches another.
			M{"podSelector": M{"matchLabels": r.selector("router", "")}},
			r.monitoringPeer(),
		}),
	}
	return r.writeAll(name, docs)
}

func (r *renderer) router(slotMap []byte) error {
	port := r.d.Router.Port
	sel := r.selector("router", "")
	var env L
	for _, v := range r.sharedEnv(false) {
		env = append(env, secretEnv(v, SharedSecret))
	}
	if r.d.Router.Resources.Limits.CPU != "" {
		// The router is CPU-bound: as many Ps as its CPU limit allows.
		// (Without a limit the field would read the node's cores.)
		env = append(env, M{"name": "GOMAXPROCS", "valueFrom": M{"resourceFieldRef": M{"resource": "limits.cpu", "divisor": "1"}}})
	}
	container := r.container("router", RouterBinary,
		L{"-addr", ":" + strconv.Itoa(port), "-slotmap", ConfigDir + "/" + cells.SlotMapFile}, port, env, r.d.Router.Resources)
	w := r.d.Router.Workload()
	docs := map[string]M{
		"deployment.yaml": r.deployment(RouterName, "router", "", w, container, RouterConfigMap, slotMap),
		"service.yaml":    r.service(RouterName, "router", "", sel, port),
		"pdb.yaml":        r.pdb(RouterName, "router", "", sel, w.MinAvailable),
		"configmap.yaml":  r.configMap(RouterConfigMap, "router", "", cells.SlotMapFile, slotMap),
		// The router is the front door: any client may reach its port.
		"networkpolicy.yaml": r.networkPolicy(RouterName, "router", "", sel, port, nil),
	}
	return r.writeAll(RouterName, docs)
}

func (r *renderer) writeAll(dir string, docs map[string]M) error {
	names := slices.Sorted(maps.Keys(docs))
	for _, n := range names {
		if err := r.put(dir, n, docs[n]); err != nil {
			return err
		}
	}
	return r.kustomization(dir, names...)
}

// sharedEnv lists the shared Secret's variables a process reads: the
// tenancy key of the spec's source, and for cells the admin token.
func (r *renderer) sharedEnv(cell bool) []string {
	var vs []string
	t := r.cfg.Tenancy
	if t.Enabled {
		switch {
		case t.Source == "session":
			vs = append(vs, t.Session.KeyEnv)
		case t.Source == "jwt" && t.JWT.KeyEnv != "":
			// The other key settings (jwks_url, jwks_file, key_file)
			// need no secret: exactly one is set.
			vs = append(vs, t.JWT.KeyEnv)
		}
	}
	if cell {
		vs = append(vs, r.cfg.Server.AdminTokenEnv)
	}
	return uniqueSorted(vs)
}

func secretEnv(name, secret string) M {
	return M{"name": name, "valueFrom": M{"secretKeyRef": M{"name": secret, "key": name}}}
}

func (r *renderer) container(name, binary string, args L, port int, env L, res config.Resources) M {
	p := r.d.Probes
	httpProbe := func(path string, failures int) M {
		return M{
			"httpGet":          M{"path": path, "port": "http"},
			"periodSeconds":    p.PeriodSeconds,
			"timeoutSeconds":   p.TimeoutSeconds,
			"failureThreshold": failures,
		}
	}
	c := M{
		"name":            name,
		"image":           r.d.Image,
		"imagePullPolicy": r.d.ImagePullPolicy,
		"command":         L{binary},
		"args":            args,
		"ports":           L{M{"name": "http", "containerPort": port, "protocol": "TCP"}},
		// The cell answers /healthz as soon as it listens (migrations run
		// behind /readyz), so startup gates liveness only.
		"startupProbe":   httpProbe(probe.Health, p.StartupFailureThreshold),
		"livenessProbe":  httpProbe(probe.Health, p.FailureThreshold),
		"readinessProbe": httpProbe(probe.Ready, p.FailureThreshold),
		"lifecycle": M{
			// The image has no shell: the kubelet's own sleep handler
			// keeps the pod serving while endpoints drain.
			"preStop": M{"sleep": M{"seconds": seconds(r.d.PreStopSleep.D())}},
		},
		"resources": resources(res),
		"securityContext": M{
			"allowPrivilegeEscalation": false,
			"readOnlyRootFilesystem":   true,
			"runAsNonRoot":             true,
			"capabilities":             M{"drop": L{"ALL"}},
		},
		"volumeMounts": L{
			M{"name": "config", "mountPath": ConfigDir, "readOnly": true},
			M{"name": "tmp", "mountPath": "/tmp"},
		},
	}
	if len(env) > 0 {
		c["env"] = env
	}
	return c
}

func resources(res config.Resources) M {
	list := func(l config.ResourceList) M {
		m := M{}
		if l.CPU != "" {
			m["cpu"] = l.CPU
		}
		if l.Memory != "" {
			m["memory"] = l.Memory
		}
		return m
	}
	out := M{}
	if m := list(res.Requests); len(m) > 0 {
		out["requests"] = m
	}
	if m := list(res.Limits); len(m) > 0 {
		out["limits"] = m
	}
	return out
}

func (r *renderer) deployment(name, component, cell string, w config.Workload, container M, configMap string, configData []byte) M {
	sel := r.selector(component, cell)
	spread := func(key string) M {
		return M{
			"maxSkew":           1,
			"topologyKey":       key,
			"whenUnsatisfiable": "ScheduleAnyway",
			"labelSelector":     M{"matchLabels": sel},
		}
	}
	sum := sha256.Sum256(configData)
	return M{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   r.meta(name, component, cell),
		"spec": M{
			"replicas": w.Replicas,
			"selector": M{"matchLabels": sel},
			// A new pod must be ready before an old one goes.
			"strategy": M{"type": "RollingUpdate", "rollingUpdate": M{"maxSurge": 1, "maxUnavailable": 0}},
			"template": M{
				"metadata": M{
					"labels": r.labels(component, cell),
					"annotations": M{
						AnnotationConfigChecksum: "sha256:" + hex.EncodeToString(sum[:]),
					},
				},
				"spec": M{
					"automountServiceAccountToken":  false,
					"enableServiceLinks":            false,
					"terminationGracePeriodSeconds": seconds(r.d.TerminationGracePeriod.D()),
					"securityContext": M{
						"runAsNonRoot":   true,
						"runAsUser":      65532,
						"runAsGroup":     65532,
						"seccompProfile": M{"type": "RuntimeDefault"},
					},
					"topologySpreadConstraints": L{spread("topology.kubernetes.io/zone"), spread("kubernetes.io/hostname")},
					"containers":                L{container},
					"volumes": L{
						M{"name": "config", "configMap": M{"name": configMap}},
						M{"name": "tmp", "emptyDir": M{"sizeLimit": "64Mi"}},
					},
				},
			},
		},
	}
}

func (r *renderer) service(name, component, cell string, sel M, port int) M {
	return M{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   r.meta(name, component, cell),
		"spec": M{
			"type":     "ClusterIP",
			"selector": sel,
			"ports":    L{M{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}},
		},
	}
}

func (r *renderer) pdb(name, component, cell string, sel M, minAvailable int) M {
	return M{
		"apiVersion": "policy/v1",
		"kind":       "PodDisruptionBudget",
		"metadata":   r.meta(name, component, cell),
		"spec": M{
			"minAvailable": minAvailable,
			"selector":     M{"matchLabels": sel},
		},
	}
}

func (r *renderer) configMap(name, component, cell, file string, data []byte) M {
	return M{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   r.meta(name, component, cell),
		"data":       M{file: string(data)},
	}
}

// monitoringPeer admits the monitoring namespace (Prometheus scrapes).
func (r *renderer) monitoringPeer() M {
	return M{"namespaceSelector": M{"matchLabels": M{"kubernetes.io/metadata.name": r.d.MonitoringNamespace}}}
}

// networkPolicy admits from (nil: anyone) to port of the selected pods.
func (r *renderer) networkPolicy(name, component, cell string, sel M, port int, from L) M {
	rule := M{"ports": L{M{"port": port, "protocol": "TCP"}}}
	if from != nil {
		rule["from"] = from
	}
	return M{
		"apiVersion": "networking.k8s.io/v1",
		"kind":       "NetworkPolicy",
		"metadata":   r.meta(name, component, cell),
		"spec": M{
			"podSelector": M{"matchLabels": sel},
			"policyTypes": L{"Ingress"},
			"ingress":     L{rule},
		},
	}
}

func seconds(d time.Duration) int { return int(d / time.Second) }

func uniqueSorted(vs []string) []string {
	out := slices.Clone(vs)
	slices.Sort(out)
	out = slices.Compact(out)
	return slices.DeleteFunc(out, func(s string) bool { return strings.TrimSpace(s) == "" })
}
