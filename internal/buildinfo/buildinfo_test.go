package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want Labels
	}{
		{"no build info", nil, false, Labels{"devel", "unknown", "unknown"}},
		{"no vcs stamp", &debug.BuildInfo{GoVersion: "go1.25.1", Main: debug.Module{Version: "(devel)"}}, true,
			Labels{"(devel)", "unknown", "go1.25.1"}},
		{"stamped", &debug.BuildInfo{GoVersion: "go1.25.1", Main: debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}}, true,
			Labels{"v1.2.3", "abc123", "go1.25.1"}},
		{"modified tree", &debug.BuildInfo{GoVersion: "go1.25.1",
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}, true,
			Labels{"devel", "abc123-dirty", "go1.25.1"}},
	} {
		if got := fromBuildInfo(tc.bi, tc.ok); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCollector(t *testing.T) {
	c := newCollector(Labels{"v1.2.3", "abc123", "go1.25.1"})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `# HELP cellgate_build_info Always 1; its labels name the running build: module version, VCS revision, Go version.
# TYPE cellgate_build_info gauge
cellgate_build_info{go_version="go1.25.1",revision="abc123",version="v1.2.3"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// The running test binary has build info: its Go version is known.
	if l := Read(); l.GoVersion == "unknown" || l.GoVersion == "" {
		t.Errorf("Read: %+v", l)
	}
}
