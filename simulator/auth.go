package simulator

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"
)

// guardedPrefix is where vLLM's authentication middleware asks for the
// key: every path starting with it (vLLM also guards /v2, /inference and
// /cohere, which the simulator does not serve).
const guardedPrefix = "/v1"

// unauthorizedBody is vLLM's answer to a request without the right key,
// byte for byte: Starlette's JSONResponse({"error": "Unauthorized"}),
// compact and without a newline.
const unauthorizedBody = `{"error":"Unauthorized"}`

// apiKey is the key requests under /v1 must carry, as `vllm serve
// --api-key` asks for it. It can change while requests run (see
// /admin/api-key); a request is checked once, when it arrives.
type apiKey struct {
	current atomic.Pointer[keyDigest] // nil: no key required
}

// keyDigest is a key and its SHA-256, compared in constant time as vLLM
// does, so that a client cannot learn the key from response times.
type keyDigest struct {
	key    string
	digest [sha256.Size]byte
}

// set makes key the one required; the empty key requires none.
func (k *apiKey) set(key string) {
	if key == "" {
		k.current.Store(nil)
		return
	}
	k.current.Store(&keyDigest{key: key, digest: sha256.Sum256([]byte(key))})
}

// get returns the key required, or "" for none.
func (k *apiKey) get() string {
	if d := k.current.Load(); d != nil {
		return d.key
	}
	return ""
}

// accepts reports whether an Authorization header value carries the key:
// the scheme "Bearer" in any case, one space, then the key, as vLLM reads
// it. Everything is accepted when no key is required.
func (k *apiKey) accepts(authorization string) bool {
	want := k.current.Load()
	if want == nil {
		return true
	}
	if authorization == "" {
		return false
	}
	scheme, token, _ := strings.Cut(authorization, " ")
	if !strings.EqualFold(scheme, "bearer") {
		return false
	}
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], want.digest[:]) == 1
}

// checkAPIKey reports why key cannot be sent in an Authorization header,
// without quoting it: keys are secrets and errors get logged.
func checkAPIKey(key string) error {
	if strings.TrimSpace(key) != key {
		return errors.New("api key must not start or end with white space: HTTP strips it from header values, so no client could send the key")
	}
	if i := strings.IndexFunc(key, unicode.IsControl); i >= 0 {
		return errors.New("api key must not contain control characters (byte " + strconv.Itoa(i) + " is one): an HTTP header cannot carry them")
	}
	return nil
}

// authGate answers 401 with vLLM's body to a request under /v1 that
// lacks the key. OPTIONS requests pass, as in vLLM (for CORS
// preflights); /health, /metrics and /admin/ are open.
func (s *Server) authGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions || !strings.HasPrefix(r.URL.Path, guardedPrefix) ||
			s.apiKey.accepts(r.Header.Get("Authorization")) {
			next.ServeHTTP(w, r)
			return
		}
		s.counts.add(faultUnauthorized)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(unauthorizedBody)))
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(unauthorizedBody))
	})
}
