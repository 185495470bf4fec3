package telemetry

import (
	"encoding/binary"

	"go.opentelemetry.io/otel/trace"
)

// Sampler decides which spans are recorded, with the semantics of the
// OpenTelemetry SDK's samplers of the same names (the OTEL_TRACES_SAMPLER
// values): always on, always off, a trace-id ratio, and a parent-based
// form of each that follows the parent's sampled flag and asks the root
// sampler only for a span without a parent. A value, so deciding is a few
// comparisons, no interface call.
type Sampler struct {
	// parentBased: a span with a valid parent (local or remote) is
	// sampled exactly when its parent is.
	parentBased bool
	// all and bound are the root decision: all samples every trace;
	// otherwise a trace is sampled when its id's last 8 bytes, shifted
	// right once, are below bound (the SDK's TraceIDRatioBased, so
	// processes of one trace agree).
	all   bool
	bound uint64
}

// AlwaysOn samples every span.
func AlwaysOn() Sampler { return Sampler{all: true} }

// AlwaysOff samples no span.
func AlwaysOff() Sampler { return Sampler{} }

// TraceIDRatio samples the share ratio (clamped to [0, 1]) of traces,
// chosen by trace id.
func TraceIDRatio(ratio float64) Sampler {
	switch {
	case ratio >= 1:
		return AlwaysOn()
	case ratio <= 0:
		return AlwaysOff()
	}
	return Sampler{bound: uint64(ratio * (1 << 63))}
}

// ParentBased follows a span's parent when it has one, and root otherwise.
func ParentBased(root Sampler) Sampler {
	root.parentBased = true
	return root
}

// sample decides for a span of trace id whose parent is parent (invalid:
// a root span).
func (s Sampler) sample(parent trace.SpanContext, id trace.TraceID) bool {
	if s.parentBased && parent.IsValid() {
		return parent.IsSampled()
	}
	return s.all || binary.BigEndian.Uint64(id[8:16])>>1 < s.bound
}
