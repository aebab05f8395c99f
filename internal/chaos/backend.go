package chaos

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aerie-dev/aerie/schema"
)

// backendTap stands between each worker and the simulator: every worker
// gets a listener of its own, so that each chat request the simulator
// receives is known by the worker that sent it, the conversation and
// turn it asks for (read from its messages) and when it was sent. The
// answers pass through untouched, faults included: a cut stream is cut
// for the worker too.
type backendTap struct {
	target *url.URL
	proxy  *httputil.ReverseProxy

	mu       sync.Mutex
	servers  map[string]*http.Server // by worker
	requests []backendRequest
	chats    int // chat requests seen, traced or not
}

// backendRequest is one chat request as a worker sent it.
type backendRequest struct {
	worker string
	at     time.Time
	// key is the digest of the request's messages other than the
	// assistant's (see contextKey); assistants is the number of
	// assistant messages it holds, the turn it asks for (from 0) with
	// --turns all.
	key        string
	assistants int
}

func newBackendTap(simAddr string) *backendTap {
	target := &url.URL{Scheme: "http", Host: simAddr}
	p := httputil.NewSingleHostReverseProxy(target)
	p.FlushInterval = -1
	p.ErrorLog = log.New(io.Discard, "", 0)
	p.Transport = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &backendTap{target: target, proxy: p, servers: map[string]*http.Server{}}
}

// listen starts the listener of a worker and returns its base URL, for
// the worker's --backend.
func (b *backendTap) listen(worker string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen for the backend of %s: %w", worker, err)
	}
	srv := &http.Server{
		Handler:           b.handler(worker),
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 10 * time.Second,
	}
	b.mu.Lock()
	b.servers[worker] = srv
	b.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}

// stop closes the listener of a worker and its connections.
func (b *backendTap) stop(worker string) {
	b.mu.Lock()
	srv := b.servers[worker]
	delete(b.servers, worker)
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// close closes every listener.
func (b *backendTap) close() {
	b.mu.Lock()
	servers := b.servers
	b.servers = map[string]*http.Server{}
	b.mu.Unlock()
	for _, srv := range servers {
		_ = srv.Close()
	}
}

// maxChatBody bounds the request body the tap reads to trace a request.
const maxChatBody = 64 << 20

func (b *backendTap) handler(worker string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/chat/completions") {
			at := time.Now()
			body, err := io.ReadAll(io.LimitReader(r.Body, maxChatBody))
			r.Body.Close()
			if err != nil {
				http.Error(w, "chaos backend tap: read the request: "+err.Error(), http.StatusBadGateway)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			b.record(worker, at, body)
		}
		b.proxy.ServeHTTP(w, r)
	})
}

func (b *backendTap) record(worker string, at time.Time, body []byte) {
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.chats++
	if json.Unmarshal(body, &req) != nil {
		return
	}
	msgs := make([]schema.Message, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = schema.Message{Role: m.Role, Content: m.Content}
	}
	key, assistants := contextKey(msgs)
	b.requests = append(b.requests, backendRequest{worker: worker, at: at, key: key, assistants: assistants})
}

// snapshot returns the requests recorded so far, in the order they came,
// and how many chat requests were seen.
func (b *backendTap) snapshot() ([]backendRequest, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]backendRequest(nil), b.requests...), b.chats
}

// contextKey is the digest of the messages of a request other than the
// assistant's (with --turns all those are the model's own answers, which
// the input does not know), and the number of assistant messages.
func contextKey(msgs []schema.Message) (key string, assistants int) {
	h := sha256.New()
	for _, m := range msgs {
		if m.Role == "assistant" {
			assistants++
			continue
		}
		h.Write([]byte(m.Role))
		h.Write([]byte{0})
		h.Write([]byte(m.Content))
		h.Write([]byte{0})
	}
	return string(h.Sum(nil)), assistants
}

// turnRef names one turn of one input conversation.
type turnRef struct {
	id   string
	turn int
}

// requestIndex maps the key of a request (contextKey) to the turn of the
// input conversation it asks for, and the number of assistant messages
// the request has (with --turns last, the input's own). Keys that two
// conversations share are ambiguous and map to the zero turnRef.
type requestIndex map[string]indexed

type indexed struct {
	ref        turnRef
	assistants int
}

// newRequestIndex lists what every request of the run can be: with
// turnsAll, turn i of a conversation is sent its messages up to its i-th
// assistant placeholder; otherwise the conversation as given is turn 0.
func newRequestIndex(input []inputPrompt, turnsAll bool) requestIndex {
	idx := requestIndex{}
	add := func(msgs []schema.Message, ref turnRef) {
		key, assistants := contextKey(msgs)
		if prev, ok := idx[key]; ok && prev.ref != ref {
			idx[key] = indexed{}
			return
		}
		idx[key] = indexed{ref: ref, assistants: assistants}
	}
	for _, p := range input {
		if !turnsAll {
			add(p.Messages, turnRef{id: p.ID})
			continue
		}
		turn := 0
		for i, m := range p.Messages {
			if m.Role == "assistant" {
				add(p.Messages[:i], turnRef{id: p.ID, turn: turn})
				turn++
			}
		}
		add(p.Messages, turnRef{id: p.ID, turn: turn})
	}
	return idx
}

// regenerationSlack is how much later than a turn's (or an answer's)
// storing a request for it may be sent without being counted as a
// generation of a stored turn: a delivery looks up the stored turns, and
// then sends its first request at once, so only a delivery that looked
// just before the turn was stored elsewhere sends it after that.
const regenerationSlack = 3 * time.Second

// RequestCheck is what the requests the workers sent say about turns
// generated twice.
type RequestCheck struct {
	// Chat counts the chat requests the simulator was sent; Traced those
	// whose messages name one turn of one input conversation (the others
	// are shared by two conversations, or unreadable).
	Chat, Traced int
	// Starts counts the traced requests that began a delivery's work on a
	// conversation (the worker's previous request for it was not the turn
	// before): the ones that must not ask for a stored turn.
	Starts int
	// Repeated counts traced requests for a turn that an earlier request
	// also asked for: the cost of kills, faults and restarts.
	Repeated int
	// Regenerated lists, as "id turn N: why", the starts that asked for a
	// turn stored, or a conversation answered, more than
	// regenerationSlack before: a finished turn generated again.
	Regenerated []string
}

// checkRequests finds in reqs (in the order they were sent) the requests
// that began a delivery's work on a conversation with a turn that was
// already stored (turnStored: first time each turn was stored, by unit
// and turn from 0) or for a conversation already answered (resultStored,
// by id). A request that continues a delivery (its worker's previous
// request for the conversation was the turn before) is not judged: two
// deliveries of one conversation may run at once (after a redelivery),
// and the later one goes on with the first one's stored turns.
func checkRequests(reqs []backendRequest, chats int, idx requestIndex, turnStored map[turnRef]time.Time, resultStored map[string]time.Time) RequestCheck {
	c := RequestCheck{Chat: chats}
	type workerConv struct{ worker, id string }
	last := map[workerConv]int{}
	seen := map[turnRef]bool{}
	sorted := append([]backendRequest(nil), reqs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].at.Before(sorted[j].at) })
	for _, r := range sorted {
		in, ok := idx[r.key]
		if !ok || in.ref.id == "" || in.assistants != r.assistants {
			continue
		}
		ref := in.ref
		c.Traced++
		if seen[ref] {
			c.Repeated++
		}
		seen[ref] = true
		wc := workerConv{r.worker, ref.id}
		prev, had := last[wc]
		last[wc] = ref.turn
		if had && prev == ref.turn-1 {
			continue
		}
		c.Starts++
		if t, ok := turnStored[ref]; ok && r.at.After(t.Add(regenerationSlack)) {
			c.Regenerated = append(c.Regenerated, fmt.Sprintf("%s turn %d: stored at %s, asked for again by %s at %s",
				ref.id, ref.turn+1, t.Format("15:04:05.000"), r.worker, r.at.Format("15:04:05.000")))
			continue
		}
		if t, ok := resultStored[ref.id]; ok && r.at.After(t.Add(regenerationSlack)) {
			c.Regenerated = append(c.Regenerated, fmt.Sprintf("%s turn %d: answered at %s, asked for again by %s at %s",
				ref.id, ref.turn+1, t.Format("15:04:05.000"), r.worker, r.at.Format("15:04:05.000")))
		}
	}
	sort.Strings(c.Regenerated)
	return c
}
