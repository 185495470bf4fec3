package telemetry

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
)

// AccessLog configures an access log, the cell's or the router's: one
// line per request.
type AccessLog struct {
	// Off writes no access log.
	Off bool
	// Level is the lines' level (a logger above it writes none).
	Level slog.Level
	// Sample is the share of lines written, in (0, 1]; 0 means 1. A
	// request answered 5xx is always written.
	Sample float64
}

// Writes reports whether the line of a request answered status is
// written: never when Off, always for a 5xx, else with probability Sample.
// It draws a random number only when Sample is below 1.
func (a AccessLog) Writes(status int) bool {
	switch {
	case a.Off:
		return false
	case status >= 500 || a.Sample <= 0 || a.Sample >= 1:
		return true
	}
	return rand.Float64() < a.Sample
}

// AccessLogFromEnv reads CELLGATE_ACCESS_LOG (off, or the lines' level:
// debug, info, warn; default info) and CELLGATE_ACCESS_LOG_SAMPLE (the
// share of lines written, in (0, 1]; default 1) with getenv.
func AccessLogFromEnv(getenv func(string) string) (AccessLog, error) {
	a := AccessLog{Level: slog.LevelInfo, Sample: 1}
	switch v := getenv("CELLGATE_ACCESS_LOG"); v {
	case "off", "none":
		a.Off = true
	default:
		l, err := ParseLevel("CELLGATE_ACCESS_LOG", v)
		if err != nil {
			return a, err
		}
		a.Level = l
	}
	if v := getenv("CELLGATE_ACCESS_LOG_SAMPLE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			return a, fmt.Errorf("CELLGATE_ACCESS_LOG_SAMPLE: want a share in (0, 1], got %q", v)
		}
		a.Sample = f
	}
	return a, nil
}

// statusAttrs holds, for every status from 100 to 599, a one-element
// attribute slice http.response.status_code=status, built once: a span's
// SetAttributes copies what it is given, so every request can pass the
// same slice instead of building one.
var statusAttrs = func() (t [600][]attribute.KeyValue) {
	for s := 100; s < len(t); s++ {
		t[s] = []attribute.KeyValue{attribute.Int("http.response.status_code", s)}
	}
	return t
}()

// StatusCodeAttr returns the attribute http.response.status_code=status
// as a one-element slice, without allocating for a status in [100, 599]
// (499, a client gone, included). The slice is shared: callers must not
// modify it.
func StatusCodeAttr(status int) []attribute.KeyValue {
	if status >= 100 && status < len(statusAttrs) {
		return statusAttrs[status]
	}
	return []attribute.KeyValue{attribute.Int("http.response.status_code", status)}
}
