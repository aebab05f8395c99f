package simulator

import (
	"net/http"
	"time"
)

// retryAfterSeconds is the Retry-After header of injected 429s and 503s
// and of outage 503s: one second, the smallest positive value the header
// can carry (whole seconds), so it is not scaled by Speed.
const retryAfterSeconds = "1"

// Messages of the injected errors. They say they were injected, so that
// nobody reading a log mistakes a rehearsal for a real failure.
var injectedMessages = map[faultKind]string{
	fault429: "The server is at capacity: too many requests are waiting. Retry later. (Fault injected by the simulator.)",
	fault500: "The engine failed while handling the request. (Fault injected by the simulator.)",
	fault503: "The server is overloaded. Retry later. (Fault injected by the simulator.)",
}

// engineFailedMessage is the message of an injected stream error, in
// the stream's error event and in the 500 a non-streaming request gets:
// the text of vLLM's EngineDeadError (vllm/v1/engine/exceptions.py),
// the failure behind most errors that end a stream part way.
const engineFailedMessage = "EngineCore encountered an issue. See stack trace (above) for the root cause. (Fault injected by the simulator.)"

// outageMessage is the body of 503s sent during a 503 outage.
const outageMessage = "The server is unavailable: its engine is down. (Outage injected by the simulator.)"

var injectedStatus = map[faultKind]int{
	fault429: http.StatusTooManyRequests,
	fault500: http.StatusInternalServerError,
	fault503: http.StatusServiceUnavailable,
}

// replyStatus answers with an injected 429, 500 or 503.
func (s *Server) replyStatus(w http.ResponseWriter, kind faultKind) {
	s.counts.add(kind)
	status := injectedStatus[kind]
	if status != http.StatusInternalServerError {
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	writeError(w, status, "", injectedMessages[kind])
}

// replyContextLength answers with an injected context length error,
// worded as vLLM words a real one for this request.
func (s *Server) replyContextLength(w http.ResponseWriter, j *job) {
	s.counts.add(fault400)
	e := contextLengthError(s.cfg.MaxModelLen, j.prompt, j.limit)
	writeError(w, e.status, e.param, e.message)
}

// hang leaves a request unanswered, without taking an engine slot,
// until the client leaves, an outage begins (then it is cut like any
// request in flight) or the server stops (then its connection closes).
func (s *Server) hang(w http.ResponseWriter, r *http.Request, outage <-chan struct{}) {
	s.counts.add(faultHang)
	select {
	case <-r.Context().Done():
		s.left(outage)
	case <-outage:
		s.cut(w, false)
	case <-s.stopping:
		abortConnection()
	}
}

// delayFirstByte holds a request for SlowFirstByte (simulated) before
// it goes on. It reports false if the request ended meanwhile.
func (s *Server) delayFirstByte(w http.ResponseWriter, r *http.Request, outage <-chan struct{}) bool {
	s.counts.add(faultSlowFirstByte)
	wait := time.NewTimer(wallTime(s.cfg.Faults.SlowFirstByte, s.cfg.Speed))
	defer wait.Stop()
	select {
	case <-wait.C:
		return true
	case <-r.Context().Done():
		s.left(outage)
	case <-outage:
		s.cut(w, false)
	case <-s.stopping:
		abortConnection()
	}
	return false
}

// cut ends a request in flight because an outage began: in a 503 outage
// a response not yet started gets 503; anything else loses its
// connection, as when vLLM dies.
func (s *Server) cut(w http.ResponseWriter, started bool) {
	s.counts.add(faultOutageCut)
	if !started && s.outages.latestMode() == Outage503 {
		w.Header().Set("Retry-After", retryAfterSeconds)
		writeError(w, http.StatusServiceUnavailable, "", outageMessage)
		return
	}
	abortConnection()
}

// left records a client that went away: if an outage began meanwhile,
// it is what closed the connection.
func (s *Server) left(outage <-chan struct{}) {
	if isClosed(outage) {
		s.counts.add(faultOutageCut)
	}
}

// abortConnection ends the request by closing its connection with
// nothing more sent: no final chunk, so the client sees the body end
// unexpectedly rather than a clean end. net/http recovers this panic
// without logging it.
func abortConnection() {
	panic(http.ErrAbortHandler)
}
