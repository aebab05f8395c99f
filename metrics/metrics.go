// Package metrics serves aerie's Prometheus metrics over HTTP. The
// metrics themselves belong to the packages that measure them (worker
// and aggregator, each in its metrics.go); this package gives them a
// registry of their own, with the Go runtime's and the process's
// collectors, and serves it at /metrics.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where the metrics are served.
const Path = "/metrics"

// NewRegistry returns a registry holding the Go runtime's and the
// process's collectors (go_*, process_*). It is not the client library's
// global default, so that nothing registered elsewhere in the process
// leaks into aerie's metrics, and two registries in one test never meet.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Server serves one registry's metrics.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Listen starts serving reg's metrics at http://addr/metrics (host:port;
// port 0 picks a free one) and returns at once; the server stops when ctx
// ends or Close is called. An address that cannot be listened on is an
// error here, before anything else starts.
func Listen(ctx context.Context, addr string, reg prometheus.Gatherer, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w (give a free host:port, or an empty value for no metrics)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
		// A scrape never waits long: collectors that ask NATS bound
		// their own calls, and this bounds the rest.
		Timeout: 10 * time.Second,
	}))
	s := &Server{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.done:
		}
	}()
	log.Info("serving metrics", "url", s.URL())
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// URL is the metrics endpoint's URL.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + Path }

// Close stops the server; a scrape under way gets up to a second to end.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}
