package runtime

import (
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }
