package runtime

import (
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

// problemBody is the RFC 9457 body of every refusal (httpguard.Encode).
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}
