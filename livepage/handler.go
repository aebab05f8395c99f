package livepage

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"time"
)

//go:embed assets
var assets embed.FS

// Handler timing; the zero HandlerConfig takes these.
const (
	// DefaultMinGap is the least time between two states sent on one
	// event stream: heartbeats of many workers arrive many times a
	// second, a person reads the page once a second at most.
	DefaultMinGap = time.Second
	// DefaultKeepAlive is how often an idle event stream sends a comment,
	// so that proxies do not close it.
	DefaultKeepAlive = 15 * time.Second
)

// Handler serves the page at /, its state as JSON at /api/state and as a
// stream of server-sent events at /api/events (each event, named
// "state", carries the whole state). The page uses the stream and polls
// /api/state when it cannot.
func Handler(p *Page) http.Handler {
	return &handler{page: p, minGap: DefaultMinGap, keepAlive: DefaultKeepAlive}
}

type handler struct {
	page      *Page
	minGap    time.Duration
	keepAlive time.Duration
}

// contentPolicy lets the page load nothing but its own script and
// styles, and talk to nothing but this server: a name or reason that got
// into the page as markup still could not run or call out.
const contentPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Security-Policy", contentPolicy)
	switch r.URL.Path {
	case "/", "/index.html":
		h.asset(w, "index.html", "text/html; charset=utf-8")
	case "/app.js":
		h.asset(w, "app.js", "text/javascript; charset=utf-8")
	case "/style.css":
		h.asset(w, "style.css", "text/css; charset=utf-8")
	case "/api/state":
		h.state(w)
	case "/api/events":
		h.events(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *handler) asset(w http.ResponseWriter, name, contentType string) {
	b, err := fs.ReadFile(assets, "assets/"+name)
	if err != nil {
		http.Error(w, "missing asset "+name, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

func (h *handler) state(w http.ResponseWriter) {
	s, _ := h.page.State()
	b, err := json.Marshal(s)
	if err != nil {
		http.Error(w, "encode state: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// events streams the state: at once, then after every change, at most
// once per minGap, until the client goes or the server stops.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // nginx: pass events on at once
	ctx := r.Context()
	if _, err := w.Write([]byte("retry: 2000\n\n")); err != nil {
		return
	}
	keepAlive := time.NewTicker(h.keepAlive)
	defer keepAlive.Stop()
	sent := false
	var seq uint64
	for {
		s, changed := h.page.State()
		if !sent || s.Seq != seq {
			b, err := json.Marshal(s)
			if err != nil {
				return
			}
			if _, err := w.Write(append(append([]byte("event: state\ndata: "), b...), "\n\n"...)); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			sent, seq = true, s.Seq
			if !h.pause(ctx.Done(), h.minGap) {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-keepAlive.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// pause waits d, or until stop is closed (then it returns false).
func (h *handler) pause(stop <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}
