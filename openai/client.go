package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// maxResponseBody bounds a non-streaming response body (a completion or
// the model list). A very long answer is a few MiB of JSON.
const maxResponseBody = 64 << 20

// Client talks to one OpenAI-compatible server. It is safe for
// concurrent use; one Client should serve all of a process's requests so
// connections are reused.
type Client struct {
	ep     endpoints
	keys   *keyring
	http   *http.Client
	limits timeLimits
	// dialect is Config.Dialect.
	dialect Dialect
}

// timeLimits are a Client's bounds on one chat completion, defaults
// applied.
type timeLimits struct {
	firstToken time.Duration // Config.FirstTokenTimeout
	idle       time.Duration // Config.IdleTimeout
	total      time.Duration // Config.RequestTimeout; 0 for no cap
}

// New returns a Client for cfg, with defaults applied to zero fields. It
// fails if BaseURL is not an absolute http or https URL, a timeout is
// negative, both APIKey and APIKeyFile are set, or the key file cannot be
// read or is empty.
func New(cfg Config) (*Client, error) {
	ep, err := parseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("openai: %w", err)
	}
	limits, err := cfg.timeLimits()
	if err != nil {
		return nil, fmt.Errorf("openai: %w", err)
	}
	keys, err := newKeyring(cfg.APIKey, cfg.APIKeyFile)
	if err != nil {
		return nil, fmt.Errorf("openai: %w", err)
	}
	c := &Client{ep: ep, keys: keys, http: cfg.HTTPClient, limits: limits, dialect: cfg.Dialect}
	if c.http == nil {
		c.http = newHTTPClient()
	}
	return c, nil
}

// String names the server the client talks to, where its key comes
// from and its time limits; it never shows the key.
func (c *Client) String() string {
	return fmt.Sprintf("openai.Client{BaseURL: %q, APIKey: %s, APIKeyFile: %q, %s}",
		c.ep.root, redactedKey(c.keys.current()), c.keys.file, c.limits)
}

// GoString is String, so that %#v does not print the API key either.
func (c *Client) GoString() string { return c.String() }

// BaseURL is the root of the server the client talks to, without /v1.
// It never holds credentials or a query: New refuses a base URL with
// either, so it is safe to show.
func (c *Client) BaseURL() string { return c.ep.root }

// ReloadAPIKey reads Config.APIKeyFile again, so that a rotated key takes
// effect without a restart: requests started after it returns send the
// new key, while requests in flight keep the one they were sent with. It
// is safe to call at any time, from any goroutine. changed reports
// whether the key differs from the one in use. A client without a key
// file does nothing and returns false, nil. On error (the file is
// missing, unreadable or empty, perhaps caught while being rewritten) the
// client keeps its current key; call again once the file is fixed. To
// rotate, write the new key to a new file and rename it over the old one,
// so that a reload never sees the file half written. Every key the client
// has held stays scrubbed from its errors.
func (c *Client) ReloadAPIKey() (changed bool, err error) {
	changed, err = c.keys.load()
	if err != nil {
		return false, fmt.Errorf("openai: reload: %w", err)
	}
	return changed, nil
}

// Health checks GET /health, which vLLM answers with 200 while its
// engine is alive. Any other status is returned as an *APIError. Without
// a deadline on ctx the check gives up after 10 seconds.
func (c *Client) Health(ctx context.Context) error {
	k := c.probe(ctx, "health check of "+c.ep.health)
	defer k.finish()
	resp, err := k.send(http.MethodGet, c.ep.health, nil)
	if err != nil {
		return err
	}
	defer k.release(resp.Body, true)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %w", k.where, readAPIError(resp, c.keys.secrets()))
	}
	return nil
}

// Model is one model served by the server.
type Model struct {
	ID string `json:"id"`
	// MaxModelLen is the context length in tokens (prompt plus answer);
	// 0 when the server does not report it.
	MaxModelLen int `json:"max_model_len"`
	// OwnedBy is the model card's owned_by, which each engine fills in
	// with its own name ("vllm", "sglang", "tensorrt_llm", "llamacpp"):
	// it is how aerie tells engines apart.
	OwnedBy string `json:"owned_by"`
}

// Models lists the served models (GET /v1/models). Without a deadline on
// ctx the call gives up after 10 seconds.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	k := c.probe(ctx, "list models from "+c.ep.models)
	defer k.finish()
	resp, err := k.send(http.MethodGet, c.ep.models, nil)
	if err != nil {
		return nil, err
	}
	defer k.release(resp.Body, true)
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s: %w", k.where, readAPIError(resp, c.keys.secrets()))
	}
	body, err := readBounded(resp.Body, maxResponseBody)
	if err != nil {
		return nil, k.fail("reading response", err)
	}
	var list struct {
		Data []Model `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", k.where, errMalformed, err)
	}
	return list.Data, nil
}

// call is one request in flight: the caller's context, the context the
// request runs under (the caller's plus the client's time limits) and a
// description for errors.
type call struct {
	c         *Client
	callerCtx context.Context
	ctx       context.Context
	end       context.CancelFunc // ends ctx; safe from any goroutine
	dog       *watchdog          // first-token and idle timeouts; nil for probes
	where     string             // e.g. "chat completion to <url>"
	// n is the answers a chat completion asked for (ChatRequest.N).
	n int
}

// startChat begins a chat completion under the client's time limits on
// top of ctx: the optional total cap as a deadline, the first-token and
// idle timeouts through a watchdog. finish must be called when it ends.
func (c *Client) startChat(ctx context.Context) *call {
	parent, endCap := ctx, context.CancelFunc(func() {})
	if c.limits.total > 0 {
		parent, endCap = context.WithTimeoutCause(ctx, c.limits.total, totalExpired(c.limits.total))
	}
	reqCtx, cancel := context.WithCancelCause(parent)
	return &call{
		c: c, callerCtx: ctx, ctx: reqCtx,
		end:   func() { cancel(nil); endCap() },
		dog:   newWatchdog(cancel, c.limits.firstToken, c.limits.idle),
		where: "chat completion to " + c.ep.chat,
	}
}

// probe begins a short call: Health and Models use the caller's deadline
// if there is one and probeTimeout otherwise.
func (c *Client) probe(ctx context.Context, where string) *call {
	k := &call{c: c, callerCtx: ctx, where: where}
	if _, ok := ctx.Deadline(); ok {
		k.ctx, k.end = context.WithCancel(ctx)
	} else {
		k.ctx, k.end = context.WithTimeoutCause(ctx, probeTimeout, probeExpired(probeTimeout))
	}
	return k
}

// finish ends the call and its timers. It runs on the goroutine that
// made the call, after the response body is released.
func (k *call) finish() {
	if k.dog != nil {
		k.dog.stop()
	}
	k.end()
}

// send sends the request. Transport failures come back described by fail.
// The response body is read under the call's watchdog, if it has one.
func (k *call) send(method, target string, body []byte) (*http.Response, error) {
	req, err := k.c.newRequest(k.ctx, method, target, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.where, err)
	}
	resp, err := k.c.http.Do(req)
	if err != nil {
		return nil, k.fail("", err)
	}
	if k.dog != nil {
		resp.Body = &watchedBody{ReadCloser: resp.Body, dog: k.dog}
	}
	return resp, nil
}

// fail describes an error that ended the call, saying which context
// ended it if one did: the caller's (wraps the context error, so
// Classify says Canceled) or one of the client's own time limits (wraps
// a timeLimitError naming it: Transient). detail, if any, says what was
// being done.
func (k *call) fail(detail string, err error) error {
	where := k.where
	if detail != "" {
		where += ": " + detail
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL that where already names
	}
	if ctxErr := k.callerCtx.Err(); ctxErr != nil {
		if cause := context.Cause(k.callerCtx); cause != nil && cause != ctxErr {
			return fmt.Errorf("%s: %w (%w)", where, ctxErr, cause)
		}
		return fmt.Errorf("%s: %w", where, ctxErr)
	}
	var limit *timeLimitError
	if k.ctx.Err() != nil && errors.As(context.Cause(k.ctx), &limit) {
		return fmt.Errorf("%s: %w", where, limit)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// newRequest builds a request with the headers every call carries.
func (c *Client) newRequest(ctx context.Context, method, target string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errInvalidRequest, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "aerie")
	if key := c.keys.current(); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return req, nil
}

// readBounded reads all of r, failing if it holds more than limit bytes.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: body larger than %d bytes", errMalformed, limit)
	}
	return b, nil
}

// release closes a response body. When the response was read to its
// end (reuse), what little is left (the end of a chunked body) is read
// first so the connection goes back to the pool; a body that still has
// more than that, or takes longer than drainWait, is not worth waiting
// for. An abandoned stream is closed at once: reading on could block
// until the server finishes the answer.
func (k *call) release(body io.ReadCloser, reuse bool) {
	if reuse {
		stop := time.AfterFunc(drainWait, k.end)
		_, _ = io.CopyN(io.Discard, body, 4<<10)
		stop.Stop()
	} else {
		k.end()
	}
	_ = body.Close()
}

// drainWait bounds the wait for the end of a body before it is closed.
const drainWait = 100 * time.Millisecond
