package telemetry

import (
	"log/slog"
	"strings"
	"testing"
)

// TestAccessLogFromEnv: the level, off, the sample share, and errors that
// name the variable.
func TestAccessLogFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want AccessLog
		err  string
	}{
		{env: nil, want: AccessLog{Level: slog.LevelInfo, Sample: 1}},
		{env: map[string]string{"CELLGATE_ACCESS_LOG": "debug", "CELLGATE_ACCESS_LOG_SAMPLE": "0.25"}, want: AccessLog{Level: slog.LevelDebug, Sample: 0.25}},
		{env: map[string]string{"CELLGATE_ACCESS_LOG": "off"}, want: AccessLog{Off: true, Level: slog.LevelInfo, Sample: 1}},
		{env: map[string]string{"CELLGATE_ACCESS_LOG": "loud"}, err: "CELLGATE_ACCESS_LOG:"},
		{env: map[string]string{"CELLGATE_ACCESS_LOG_SAMPLE": "0"}, err: "CELLGATE_ACCESS_LOG_SAMPLE: want a share in (0, 1]"},
		{env: map[string]string{"CELLGATE_ACCESS_LOG_SAMPLE": "x"}, err: "CELLGATE_ACCESS_LOG_SAMPLE"},
	} {
		got, err := AccessLogFromEnv(func(k string) string { return tc.env[k] })
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v: %+v, %v; want %+v", tc.env, got, err, tc.want)
		}
	}
}

// TestAccessLogWrites: off writes nothing, a 5xx is always written, and a
// sample share lets through about that share of the others.
func TestAccessLogWrites(t *testing.T) {
	if (AccessLog{Off: true}).Writes(500) {
		t.Error("off wrote a 5xx")
	}
	if !(AccessLog{}).Writes(200) || !(AccessLog{Sample: 1}).Writes(200) {
		t.Error("sample 0 or 1 held a line back")
	}
	a := AccessLog{Sample: 0.1}
	n := 0
	for range 10_000 {
		if a.Writes(200) {
			n++
		}
		if !a.Writes(503) {
			t.Fatal("a 503 was sampled out")
		}
	}
	if n < 800 || n > 1200 {
		t.Errorf("%d of 10000 lines at sample 0.1", n)
	}
}

// TestStatusCodeAttr: the shared slices hold the status, and one outside
// the table is still right.
func TestStatusCodeAttr(t *testing.T) {
	for _, s := range []int{100, 200, 499, 599, 600, 42} {
		kv := StatusCodeAttr(s)
		if len(kv) != 1 || kv[0].Key != "http.response.status_code" || kv[0].Value.AsInt64() != int64(s) {
			t.Errorf("%d: %v", s, kv)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = StatusCodeAttr(404) }); n != 0 {
		t.Errorf("%v allocs per StatusCodeAttr", n)
	}
}
