package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aerie-dev/aerie/metrics"
)

// addMetricsFlag adds --metrics-listen.
func addMetricsFlag(fs *flag.FlagSet) *string {
	return fs.String("metrics-listen", os.Getenv("AERIE_METRICS_LISTEN"), "host:port to serve Prometheus metrics at /metrics, e.g. 0.0.0.0:9464 (empty: no metrics; env AERIE_METRICS_LISTEN)")
}

// serveMetrics serves a new registry at addr and returns it, with the
// function that stops the server (after the command's grace period, so
// not with ctx); with addr empty it returns a nil registry (no metrics
// kept) and a no-op.
func serveMetrics(ctx context.Context, addr string, log *slog.Logger) (prometheus.Registerer, func(), error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	reg := metrics.NewRegistry()
	s, err := metrics.Listen(context.WithoutCancel(ctx), addr, reg, log)
	if err != nil {
		return nil, nil, err
	}
	return reg, func() { s.Close() }, nil
}
