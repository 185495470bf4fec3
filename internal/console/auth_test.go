package console

import (
	"strings"
	"testing"
)

func TestChartEscapes(t *testing.T) {
	svg := string(stateChart(QueuesReport{Databases: []DatabaseQueues{{DatabaseStatus: DatabaseStatus{Database: "<x>"}}}}))
	if strings.Contains(svg, "<x>") || !strings.Contains(svg, "&lt;x&gt;") {
		t.Errorf("database name not escaped: %s", svg)
	}
}

func TestShortTokensRefused(t *testing.T) {
	long := strings.Repeat("a", 32)
	for _, tc := range []struct{ admin, op, want string }{
		{"short", "", "CELLGATE_ADMIN_TOKEN"},
		{long, "short-operator", "CELLGATE_OPERATOR_TOKEN"},
	} {
		if _, err := New(Config{AdminToken: tc.admin, OperatorToken: tc.op}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("admin %q operator %q: %v, want an error naming %s", tc.admin, tc.op, err, tc.want)
		}
	}
}
