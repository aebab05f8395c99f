package simulator

import (
	"net/http"
	"strings"
)

// outageGate answers for a server that is down. During a 503 outage
// every request gets 503 (/health with an empty body, the rest with
// vLLM's error body), except /metrics, which a vLLM API process whose
// engine died still serves and which carries the fault counters, and
// /admin/, which must stay reachable to end the outage. During a refuse
// outage Serve has closed the listener; a request that gets here anyway
// (with Handler alone, or on a connection made just before the close)
// has its connection closed unanswered.
func (s *Server) outageGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" || strings.HasPrefix(r.URL.Path, "/admin/") {
			next.ServeHTTP(w, r)
			return
		}
		switch s.outages.mode() {
		case Outage503:
			s.counts.add(faultOutageRejected)
			w.Header().Set("Retry-After", retryAfterSeconds)
			if r.URL.Path == "/health" {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			writeError(w, http.StatusServiceUnavailable, "", outageMessage)
		case OutageRefuse:
			s.counts.add(faultOutageRejected)
			abortConnection()
		default:
			next.ServeHTTP(w, r)
		}
	})
}
