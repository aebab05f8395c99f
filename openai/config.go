package openai

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults applied when the caller does not choose.
const (
	// DefaultFirstTokenTimeout bounds the wait for the first token of a
	// chat completion. vLLM sends nothing, not even response headers,
	// while a request waits in its queue behind a full batch, so a queued
	// request looks like a slow connection: the bound is generous.
	DefaultFirstTokenTimeout = 30 * time.Minute

	// DefaultIdleTimeout bounds the silence after the first token. A
	// server that is generating sends a token every fraction of a second;
	// minutes without a byte mean it is stuck.
	DefaultIdleTimeout = 5 * time.Minute

	// probeTimeout bounds Health and Models when the caller's context has
	// no deadline: both answer at once on a live server.
	probeTimeout = 10 * time.Second
)

// Config configures a Client. The zero value of every field except BaseURL
// is usable.
type Config struct {
	// BaseURL is the server's address, for example http://127.0.0.1:8000.
	// A trailing "/v1" (the form OpenAI SDKs expect) and trailing slashes
	// are accepted and removed. Only http and https are supported, and
	// credentials belong in APIKey, not in the URL.
	BaseURL string

	// APIKey, when set, is sent as "Authorization: Bearer <key>". It never
	// appears in errors, logs or String output. Empty means no key, unless
	// APIKeyFile is set. A key holding a line break or another control
	// character cannot be sent in a header and is refused by New.
	APIKey string

	// APIKeyFile, when set, names a file holding the API key (surrounding
	// whitespace is ignored), read by New and again by
	// Client.ReloadAPIKey, so that a rotated key is picked up without a
	// restart. APIKey must then be empty. A missing, unreadable or empty
	// file, or one holding more than a key on one line, is an error.
	APIKeyFile string

	// HTTPClient sends every request. Nil means a client made for many
	// concurrent long streams to one host: up to 4,096 idle connections
	// kept for reuse, 10 s limits on dialing and TLS handshakes, and no
	// limit on waiting for response headers (vLLM sends them with the
	// first token, after any time queued). A supplied client should have
	// no overall Timeout: the time limits below bound each request
	// instead, and a client Timeout would cut long answers short.
	HTTPClient *http.Client

	// FirstTokenTimeout bounds the wait from sending a chat completion
	// request to its first token: the first data event of a stream
	// (keep-alive comments before it do not count), or the response
	// headers of a response that is not a stream. Chat's whole answer
	// comes with its headers, so for Chat it bounds the generation. Zero
	// means DefaultFirstTokenTimeout (30 minutes). Expiry is a Transient
	// error: the server was too slow, the prompt may be fine.
	FirstTokenTimeout time.Duration

	// IdleTimeout bounds the silence after the first token: the request
	// fails when no byte at all (keep-alive comments included) arrives
	// from the server for this long, while a long answer that keeps
	// arriving runs as long as it takes. For a response that is not a
	// stream it bounds the gaps while reading the body. Zero means
	// DefaultIdleTimeout (5 minutes). Expiry is a Transient error.
	IdleTimeout time.Duration

	// RequestTimeout, when positive, caps one chat completion from
	// sending the request to the end of the answer, however steadily the
	// answer arrives. Zero (the default) means no cap: a 100K-token
	// reasoning answer at 20 tokens/s takes well over an hour, and
	// FirstTokenTimeout and IdleTimeout already end a request that makes
	// no progress. Expiry is a Transient error.
	RequestTimeout time.Duration

	// Dialect is how the server's API differs from vLLM's; the zero
	// value is vLLM's. engine.Profile.Dialect gives each engine's.
	Dialect Dialect
}

// String describes the configuration with the API key redacted, so a
// Config can be logged safely.
func (c Config) String() string {
	client := "default"
	if c.HTTPClient != nil {
		client = "custom"
	}
	return fmt.Sprintf("openai.Config{BaseURL: %q, APIKey: %s, APIKeyFile: %q, HTTPClient: %s, FirstTokenTimeout: %v, IdleTimeout: %v, RequestTimeout: %v}",
		withoutUserinfo(c.BaseURL), redactedKey(c.APIKey), c.APIKeyFile, client, c.FirstTokenTimeout, c.IdleTimeout, c.RequestTimeout)
}

// GoString is String, so that %#v does not print the API key either.
func (c Config) GoString() string { return c.String() }

// timeLimits checks the time limits and applies their defaults.
func (c Config) timeLimits() (timeLimits, error) {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"FirstTokenTimeout", c.FirstTokenTimeout}, {"IdleTimeout", c.IdleTimeout}, {"RequestTimeout", c.RequestTimeout}} {
		if f.d < 0 {
			return timeLimits{}, fmt.Errorf("negative %s %v (zero means the default)", f.name, f.d)
		}
	}
	l := timeLimits{firstToken: c.FirstTokenTimeout, idle: c.IdleTimeout, total: c.RequestTimeout}
	if l.firstToken == 0 {
		l.firstToken = DefaultFirstTokenTimeout
	}
	if l.idle == 0 {
		l.idle = DefaultIdleTimeout
	}
	return l, nil
}

// String shows the limits in effect, as Config field names.
func (l timeLimits) String() string {
	total := "none"
	if l.total > 0 {
		total = l.total.String()
	}
	return fmt.Sprintf("FirstTokenTimeout: %v, IdleTimeout: %v, RequestTimeout: %s", l.firstToken, l.idle, total)
}

func redactedKey(key string) string {
	if key == "" {
		return "none"
	}
	return "[redacted]"
}

// endpoints holds the URLs derived from Config.BaseURL.
type endpoints struct {
	root string // server root, without /v1: /health lives here
	chat string // <root>/v1/chat/completions
	// completions is <root>/v1/completions, where hidden states are
	// extracted (Extract).
	completions string
	models      string // <root>/v1/models
	health      string // <root>/health
}

// parseBaseURL validates raw and derives the endpoint URLs from it.
func parseBaseURL(raw string) (endpoints, error) {
	bad := func(why string) (endpoints, error) {
		return endpoints{}, fmt.Errorf("invalid base URL %q: %s", withoutUserinfo(raw), why)
	}
	trimmed := strings.TrimSpace(raw)
	if trimmed == "" {
		return bad("empty")
	}
	if !strings.Contains(trimmed, "://") {
		return bad("missing scheme (want http:// or https://)")
	}
	u, err := url.Parse(trimmed)
	if err != nil {
		// url.Error repeats the input; keep only the reason.
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err
		}
		return bad(err.Error())
	}
	switch u.Scheme {
	case "http", "https":
	default:
		return bad(fmt.Sprintf("scheme %q is not http or https", u.Scheme))
	}
	if u.Host == "" || u.Hostname() == "" {
		return bad("missing host")
	}
	if u.User != nil {
		// Credentials in the URL would leak into every error message.
		return bad("credentials in the URL are not supported (use APIKey)")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return bad("query and fragment are not supported")
	}
	path := strings.TrimRight(u.Path, "/")
	path = strings.TrimSuffix(path, "/v1")
	path = strings.TrimRight(path, "/")
	u.Path, u.RawPath = path, ""
	root := u.String()
	return endpoints{
		root:        root,
		chat:        root + "/v1/chat/completions",
		completions: root + "/v1/completions",
		models:      root + "/v1/models",
		health:      root + "/health",
	}, nil
}

// withoutUserinfo hides credentials ("user:password@") in a URL that is
// about to be printed, without relying on the URL being parseable.
func withoutUserinfo(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return raw
	}
	return scheme + "://[redacted]" + rest[at:]
}

// maxIdlePerHost bounds the idle connections a client keeps to its
// server. It costs nothing while the window is smaller: it is a ceiling,
// not a pool kept open.
const maxIdlePerHost = 4096

// newHTTPClient returns the client used when Config.HTTPClient is nil.
//
// It is tuned for a worker holding hundreds of streams open to one
// server: idle connections are kept per host up to maxIdlePerHost, well
// above the windows workers hold (200 by default, about a thousand
// against a large server), so that finished
// streams hand their connection to the next request instead of closing
// it and dialing anew (at a window of 600, a limit of 512 redialed 88
// connections every time the window emptied); idle connections close
// after 90 s unused; there is no overall client Timeout and no
// ResponseHeaderTimeout, because vLLM sends response headers together
// with the first token, so a request queued behind a full batch looks
// like a server that has not answered yet (Config.FirstTokenTimeout
// bounds that wait instead). Dialing and TLS handshakes are bounded at
// 10 s, since a server that cannot accept a connection in that time is
// down.
// Compression is not requested, so no proxy buffers the event stream to
// compress it. HTTP/2 stays off: one connection per stream avoids
// head-of-line blocking and per-connection stream limits.
func newHTTPClient() *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		MaxIdleConns:          0, // no limit over all hosts: a client talks to one
		MaxIdleConnsPerHost:   maxIdlePerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		Protocols:             protocols,
	}
	return &http.Client{Transport: transport}
}
