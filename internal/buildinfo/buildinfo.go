// Package buildinfo exports cellgate_build_info, the gauge that names the
// build a cell or the router runs, from the Go toolchain's own record
// (runtime/debug.ReadBuildInfo): module version, VCS revision and Go
// version. A dashboard joins it to see which build a series came from.
//
// Concurrency: stateless; NewCollector may be called from any goroutine,
// and its collector is safe for concurrent scrapes.
package buildinfo

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Labels are the build's label values.
type Labels struct {
	// Version is the main module's version: "(devel)" for a build from a
	// work tree, "devel" when no build information is embedded.
	Version string
	// Revision is the VCS commit (vcs.revision), suffixed "-dirty" when
	// vcs.modified; "unknown" when the build did not stamp it (go build
	// -buildvcs=false, go test, go run of a file list).
	Revision string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Read returns the running binary's labels.
func Read() Labels { return fromBuildInfo(debug.ReadBuildInfo()) }

func fromBuildInfo(bi *debug.BuildInfo, ok bool) Labels {
	l := Labels{Version: "devel", Revision: "unknown", GoVersion: "unknown"}
	if !ok || bi == nil {
		return l
	}
	if bi.Main.Version != "" {
		l.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		l.GoVersion = bi.GoVersion
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if s.Value != "" {
				l.Revision = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && l.Revision != "unknown" {
		l.Revision += "-dirty"
	}
	return l
}

// NewCollector returns cellgate_build_info{version,revision,go_version},
// always 1, for the running binary; register it once per registry.
func NewCollector() prometheus.Collector { return newCollector(Read()) }

func newCollector(l Labels) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cellgate_build_info",
		Help: "Always 1; its labels name the running build: module version, VCS revision, Go version.",
		ConstLabels: prometheus.Labels{
			"version": l.Version, "revision": l.Revision, "go_version": l.GoVersion,
		},
	})
	g.Set(1)
	return g
}
