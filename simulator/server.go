package simulator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// shutdownGrace is how long Serve lets requests in flight finish after
// its context ends, with the engine still running, before it stops the
// engine and closes the connections left.
const shutdownGrace = 5 * time.Second

// Server is a simulated vLLM server. Its engine runs in Run (or Serve);
// requests that arrive before Run starts wait for it.
type Server struct {
	cfg     Config
	eng     *engine
	handler http.Handler
	created int64 // Unix time of New, reported as the model's creation
}

// New applies defaults to cfg, validates it and builds a server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, eng: newEngine(cfg), created: time.Now().Unix()}
	reg := prometheus.NewRegistry()
	if err := reg.Register(newCollector(s.eng, cfg)); err != nil {
		return nil, fmt.Errorf("simulator: registering metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.handler = mux
	return s, nil
}

// Config returns the configuration in use, defaults applied.
func (s *Server) Config() Config { return s.cfg }

// Handler serves the OpenAI-compatible API, /health and /metrics.
func (s *Server) Handler() http.Handler { return s.handler }

// Run runs the engine until ctx ends, then fails the requests still in
// flight (503, or a stream cut short) and refuses new ones. It returns
// nil when ctx ends and an error if called a second time: a server's
// engine runs once.
func (s *Server) Run(ctx context.Context) error {
	return s.eng.run(ctx)
}

// Serve runs the engine and serves HTTP on l until ctx ends. Then it
// stops accepting connections, gives requests in flight up to 5s to
// finish, stops the engine and closes what is left. It returns nil after
// a shutdown that ctx asked for.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngine()
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(engineCtx) }()

	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 30 * time.Second}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(l) }()

	select {
	case err := <-serveDone:
		stopEngine()
		<-runDone
		return fmt.Errorf("simulator: serving on %s: %w", l.Addr(), err)
	case err := <-runDone:
		_ = srv.Close()
		<-serveDone
		return err
	case <-ctx.Done():
	}

	graceCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	shutdownErr := srv.Shutdown(graceCtx)
	stopEngine()
	runErr := <-runDone
	if shutdownErr != nil {
		// Requests outlived the grace period; the engine has failed
		// them, so closing now only cuts off what is still being sent.
		_ = srv.Close()
	}
	if err := <-serveDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("simulator: serving on %s: %w", l.Addr(), err)
	}
	return runErr
}

// Stats returns a snapshot of the engine.
func (s *Server) Stats() Stats {
	st, _ := s.eng.snapshot()
	return st
}

// OutputTokens is how many completion tokens the server will generate
// for messages with this max_tokens (0 or less means none given, so the
// rest of the context). It is 0 when the prompt leaves no room.
func (s *Server) OutputTokens(messages []Message, maxTokens int) int {
	limit := s.cfg.MaxModelLen - promptTokens(messages)
	if maxTokens > 0 {
		limit = min(limit, maxTokens)
	}
	if limit < 1 {
		return 0
	}
	return s.cfg.plan(messages, limit).tokens
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if !s.eng.healthy() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, modelList{
		Object: "list",
		Data: []modelCard{{
			ID:          s.cfg.Model,
			Object:      "model",
			Created:     s.created,
			OwnedBy:     "vllm",
			Root:        s.cfg.Model,
			MaxModelLen: s.cfg.MaxModelLen,
		}},
	})
}
