package simulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The admin endpoints start and end outages, rotate the API key and
// rename the served model while the server runs, and report the fault
// settings:
//
//	POST   /admin/outage?mode=refuse|503&duration=60s
//	DELETE /admin/outage
//	POST   /admin/api-key   (body: the new key; empty: no key required)
//	POST   /admin/model?name=NAME
//	GET    /admin/faults
//
// Durations are simulated time. A refuse outage makes these endpoints
// unreachable too, so it must have a duration and ends by itself; a 503
// outage without one lasts until DELETE. A new outage replaces the one
// in progress. A new key or model name applies to requests that arrive
// afterwards; requests in flight go on as they began. Every answer is
// the report GET /admin/faults gives. The endpoints need no key: they
// are a test's control plane, for a server listening on loopback.

// maxAPIKeyBytes bounds the body of POST /admin/api-key.
const maxAPIKeyBytes = 4 << 10

// faultReport is the body of the admin endpoints.
type faultReport struct {
	// Model is the name of the model served now.
	Model string `json:"model"`
	// APIKeyRequired tells whether requests under /v1 need a key now;
	// the key itself is never reported.
	APIKeyRequired bool          `json:"api_key_required"`
	Faults         faultSettings `json:"faults"`
	// Outage is the outage in progress; null when the server is up.
	Outage *outageState `json:"outage"`
	// Clock is the simulated time since the engine started.
	Clock string `json:"clock"`
	// Injected counts the faults injected so far, by kind (the kind
	// label of aerie_sim_faults_injected_total).
	Injected map[string]int64 `json:"injected"`
}

// faultSettings is Faults as JSON, durations as Go durations and the
// schedule in --outage syntax.
type faultSettings struct {
	Rate400           float64  `json:"rate_400"`
	Rate429           float64  `json:"rate_429"`
	Rate500           float64  `json:"rate_500"`
	Rate503           float64  `json:"rate_503"`
	HangRate          float64  `json:"hang_rate"`
	DisconnectRate    float64  `json:"disconnect_rate"`
	StreamErrorRate   float64  `json:"stream_error_rate"`
	SlowFirstByte     string   `json:"slow_first_byte"`
	SlowFirstByteRate float64  `json:"slow_first_byte_rate"`
	Outages           []string `json:"outages"`
}

func (s *Server) report() faultReport {
	f := s.cfg.Faults
	outages := make([]string, len(f.Outages))
	for i, o := range f.Outages {
		outages[i] = o.String()
	}
	outage, clock := s.outages.state(time.Now())
	injected := make(map[string]int64, numFaultKinds-1)
	for k := faultNone + 1; k < numFaultKinds; k++ {
		injected[faultLabels[k]] = s.counts[k].Load()
	}
	for k := fileMissing; k <= fileSlowLock; k++ {
		if n := s.files.injected[k].Load(); n > 0 || s.cfg.HiddenStatesPath != "" {
			injected[fileFaultLabels[k]] = n
		}
	}
	return faultReport{
		Model:          s.model.get(),
		APIKeyRequired: s.apiKey.get() != "",
		Faults: faultSettings{
			Rate400: f.Rate400, Rate429: f.Rate429, Rate500: f.Rate500, Rate503: f.Rate503,
			HangRate: f.HangRate, DisconnectRate: f.DisconnectRate, StreamErrorRate: f.StreamErrorRate,
			SlowFirstByte: f.SlowFirstByte.String(), SlowFirstByteRate: f.SlowFirstByteRate,
			Outages: outages,
		},
		Outage:   outage,
		Clock:    clock.String(),
		Injected: injected,
	}
}

func (s *Server) handleFaults(w http.ResponseWriter, _ *http.Request) {
	writeReport(w, s.report())
}

func (s *Server) handleOutageEnd(w http.ResponseWriter, _ *http.Request) {
	s.outages.end()
	writeReport(w, s.report())
}

func (s *Server) handleOutageStart(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	mode := OutageMode(q.Get("mode"))
	if !mode.valid() {
		writeError(w, http.StatusBadRequest, "mode", fmt.Sprintf(
			"mode must be %q or %q, got %q; e.g. POST /admin/outage?mode=503&duration=60s", OutageRefuse, Outage503, mode))
		return
	}
	var sim time.Duration
	if v := q.Get("duration"); v != "" {
		var err error
		if sim, err = time.ParseDuration(v); err != nil || sim <= 0 {
			writeError(w, http.StatusBadRequest, "duration", fmt.Sprintf(
				"duration must be a positive Go duration of simulated time such as 60s, got %q", v))
			return
		}
	}
	if mode == OutageRefuse && sim == 0 {
		writeError(w, http.StatusBadRequest, "duration",
			"a refuse outage needs a duration, e.g. duration=60s: it makes this endpoint unreachable too, so nothing could end it")
		return
	}
	// Hold off Serve's closing of the connections until the answer is
	// out (see outageSwitch.replying).
	s.outages.replying.RLock()
	defer s.outages.replying.RUnlock()
	s.outages.begin(mode, outageFromAdmin, sim)
	if mode == OutageRefuse {
		w.Header().Set("Connection", "close")
	}
	writeReport(w, s.report())
}

// handleAPIKey makes the request body, white space trimmed, the key
// requests under /v1 must carry from now on; an empty body removes the
// key. It is a rotation as a test wants it: no grace period in which the
// old key still works.
func (s *Server) handleAPIKey(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAPIKeyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "", fmt.Sprintf(
			"reading the new key: %v; send it as the whole body (at most %d bytes), e.g. curl --data-binary @keyfile", err, maxAPIKeyBytes))
		return
	}
	key := strings.TrimSpace(string(body))
	if err := checkAPIKey(key); err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	s.apiKey.set(key)
	writeReport(w, s.report())
}

// handleModelRename makes name the model served from now on, as a vLLM
// restarted with another --served-model-name: /v1/models lists it and
// requests naming the old one get 404.
func (s *Server) handleModelRename(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if strings.TrimSpace(name) == "" {
		writeError(w, http.StatusBadRequest, "name",
			"name must be the new served model name, e.g. POST /admin/model?name=org/model-v2")
		return
	}
	s.model.set(name)
	writeReport(w, s.report())
}

// writeReport sends rep with its length and flushes it, so that the
// client has the whole answer even if the connection closes right after
// (as it does when a refuse outage begins).
func writeReport(w http.ResponseWriter, rep faultReport) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetIndent("", "  ")
	// A report of plain strings and numbers cannot fail to encode.
	_ = enc.Encode(rep)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(body.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body.Bytes())
	_ = http.NewResponseController(w).Flush()
}
