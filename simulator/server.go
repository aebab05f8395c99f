package simulator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is a simulated vLLM server. Its engine runs in Run (or Serve);
// requests that arrive before Run starts wait for it.
type Server struct {
	cfg      Config
	eng      *engine
	handler  http.Handler
	created  int64 // Unix time of New, reported as the model's creation
	counts   *faultCounts
	injector *injector
	outages  *outageSwitch
	model    *servedModel
	apiKey   apiKey
	files    *fileFaulter
	// dialect is the engine the server speaks as (Config.Engine).
	dialect dialect

	ran      atomic.Bool
	stopping chan struct{} // closed when the server stops: hung requests end
	stopOnce sync.Once
}

// New applies defaults to cfg, validates it and builds a server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	counts := new(faultCounts)
	s := &Server{
		cfg:      cfg,
		eng:      newEngine(cfg),
		created:  time.Now().Unix(),
		counts:   counts,
		injector: newInjector(cfg),
		outages:  newOutageSwitch(cfg.Speed, counts),
		model:    newServedModel(cfg.Model),
		files:    &fileFaulter{faults: cfg.FileFaults},
		dialect:  dialects[cfg.Engine],
		stopping: make(chan struct{}),
	}
	s.apiKey.set(cfg.APIKey)
	reg := prometheus.NewRegistry()
	if err := reg.Register(newCollector(s.eng, counts, s.model.get, s.dialect.metrics)); err != nil {
		return nil, fmt.Errorf("simulator: registering metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /health", s.handleHealth)
	if !cfg.NoMetrics {
		mux.Handle("GET "+s.dialect.metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		if p := s.dialect.jsonMetrics; p != "" {
			mux.HandleFunc("GET "+p, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, []any{}) })
		}
	}
	if s.dialect.serverInfo {
		mux.HandleFunc("GET /get_server_info", s.serveServerInfo)
	}
	mux.HandleFunc("POST /admin/outage", s.handleOutageStart)
	mux.HandleFunc("DELETE /admin/outage", s.handleOutageEnd)
	mux.HandleFunc("GET /admin/faults", s.handleFaults)
	mux.HandleFunc("POST /admin/api-key", s.handleAPIKey)
	mux.HandleFunc("POST /admin/model", s.handleModelRename)
	// The key is checked before anything else, as vLLM's middleware
	// does, so a request without it gets 401 even during a 503 outage.
	s.handler = s.authGate(s.outageGate(mux))
	return s, nil
}

// Config returns the configuration in use, defaults applied, with the
// model name and API key as last set through /admin/.
func (s *Server) Config() Config {
	c := s.cfg
	c.Model = s.model.get()
	c.APIKey = s.apiKey.get()
	return c
}

// Handler serves the OpenAI-compatible API, /health, /metrics and the
// fault injection endpoints under /admin/.
func (s *Server) Handler() http.Handler { return s.handler }

// Run runs the engine, and the outage schedule, until ctx ends, then
// fails the requests still in flight (503, or a stream cut short) and
// refuses new ones. It returns nil when ctx ends and an error if called
// a second time: a server's engine runs once.
func (s *Server) Run(ctx context.Context) error {
	if s.ran.Swap(true) {
		return errors.New("simulator: engine already started; Run may be called once")
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	s.outages.start(time.Now())
	if len(s.cfg.Faults.Outages) > 0 {
		wg.Go(func() { s.outages.runSchedule(ctx, s.cfg.Faults.Outages) })
	}
	err := s.eng.run(ctx)
	cancel()
	wg.Wait()
	s.outages.end()
	s.stop()
	return err
}

// stop ends the requests that would otherwise never end (hung ones and
// those waiting out a slow first byte) by closing their connections.
func (s *Server) stop() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

// Stats returns a snapshot of the engine.
func (s *Server) Stats() Stats {
	st, _ := s.eng.snapshot()
	st.Faults = s.counts.snapshot()
	return st
}

// OutputTokens is how many completion tokens the server will generate
// for messages with this max_tokens (0 or less means none given, so the
// rest of the context), sent without sampling fields (any field that
// changes sampling draws another answer). It is 0 when the prompt leaves
// no room.
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
	name := s.model.get()
	writeJSON(w, http.StatusOK, modelList{
		Object: "list",
		Data: []modelCard{{
			ID:          name,
			Object:      "model",
			Created:     s.created,
			OwnedBy:     s.dialect.ownedBy,
			Root:        name,
			MaxModelLen: s.cfg.MaxModelLen,
		}},
	})
}
