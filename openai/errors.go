package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors wrapped by the errors this package returns (with
// timeLimitError, for the client's own time limits). They are
// unexported: callers decide what to do with Classify, and read the
// details in the message.
var (
	// errStreamEnded: the stream stopped before it was complete.
	errStreamEnded = errors.New("stream ended early")
	// errMalformed: the server sent something that is not the API's shape.
	errMalformed = errors.New("malformed response")
	// errInvalidRequest: the request cannot be sent as given.
	errInvalidRequest = errors.New("invalid request")
)

// Bounds on what is read from and kept of a failed response.
const (
	// maxErrorRead is how much of an error body is read for parsing.
	maxErrorRead = 64 << 10
	// maxErrorBody is how much of it APIError.Body keeps.
	maxErrorBody = 4 << 10
	// maxErrorMessage is how much of the message Error() prints, so one
	// failure cannot flood a log line.
	maxErrorMessage = 1 << 10
	// maxRetryAfter caps a Retry-After hint.
	maxRetryAfter = 24 * time.Hour
)

// APIError is a failure reported by the server: a non-2xx response, or an
// error object the server sent after accepting the request (see
// InStream).
type APIError struct {
	// Status is the HTTP status of the response that carried the error:
	// 0 for an error event inside a stream, and a 2xx status for an
	// error object that a server sent as the body of a successful
	// non-streaming response.
	Status  int
	Type    string // e.g. "BadRequestError"
	Message string // the server's explanation
	Code    string // numeric or symbolic code, as text ("400", "context_length_exceeded")
	Param   string // the offending parameter, when the server names one
	// Body is the raw response body, at most 4 KiB, kept for diagnosis
	// when the server did not send the usual error object.
	Body string
	// RetryAfter is the server's Retry-After hint; zero when absent.
	RetryAfter time.Duration
}

// InStream reports whether the server sent the error after it had
// accepted the request with a 2xx status: as an event inside a stream
// (Status 0), or as the body of a successful non-streaming response. Such
// an error is the server failing while generating (vLLM sends one when
// its engine dies or raises mid-answer), not a judgement of the prompt:
// vLLM gives it the code 400 by default, whatever went wrong. Classify
// calls every such error Transient, and callers may count it as a server
// fault. An error status before streaming (for example 400 for a prompt
// longer than the context) is not InStream.
func (e *APIError) InStream() bool {
	return e.Status == 0 || e.Status/100 == 2
}

// Error describes the failure as "status 400 BadRequestError: message",
// or "error in stream BadRequestError: message" for an error event.
func (e *APIError) Error() string {
	var b strings.Builder
	if e.Status == 0 {
		b.WriteString("error in stream")
	} else {
		fmt.Fprintf(&b, "status %d", e.Status)
	}
	if e.Type != "" {
		b.WriteString(" ")
		b.WriteString(e.Type)
	}
	// One line, however the server formatted it, so it fits a log line.
	msg := strings.Join(strings.Fields(e.Message), " ")
	if msg == "" {
		msg = strings.Join(strings.Fields(e.Body), " ")
	}
	if msg == "" && e.Status != 0 {
		msg = http.StatusText(e.Status)
	}
	if msg != "" {
		b.WriteString(": ")
		b.WriteString(truncate(msg, maxErrorMessage))
	}
	if e.Code != "" && e.Code != strconv.Itoa(e.Status) {
		fmt.Fprintf(&b, " (code %s)", e.Code)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	return b.String()
}

// errorObject is the error shape of OpenAI-compatible servers. Both
// {"error": {...}} and the older top-level {"object": "error", ...} are
// decoded into it.
type errorObject struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Param   json.RawMessage `json:"param"`
	Code    json.RawMessage `json:"code"`
}

// errorEnvelope matches both error shapes at once. Error stays raw
// because some proxies send {"error": "text"} instead of an object.
type errorEnvelope struct {
	Error  json.RawMessage `json:"error"`
	Object string          `json:"object"`
	errorObject
}

// errorFrom returns the error object in env, or nil if it has none.
func (env *errorEnvelope) errorFrom() *errorObject {
	raw := bytes.TrimSpace(env.Error)
	switch {
	case len(raw) > 0 && raw[0] == '{':
		var obj errorObject
		if json.Unmarshal(raw, &obj) == nil {
			return &obj
		}
	case len(raw) > 0 && raw[0] == '"':
		return &errorObject{Message: rawText(raw)}
	}
	if env.Object == "error" {
		return &env.errorObject
	}
	return nil
}

// apiErrorFrom converts a decoded error object, removing the client's
// API keys (secrets) from the message in case a server echoed one.
func apiErrorFrom(status int, obj *errorObject, secrets []string) *APIError {
	return &APIError{
		Status:  status,
		Type:    obj.Type,
		Message: string(redact([]byte(obj.Message), secrets)),
		Code:    rawText(obj.Code),
		Param:   rawText(obj.Param),
	}
}

// readAPIError builds an APIError from a non-2xx response. It reads at
// most maxErrorRead bytes of the body; the client's API keys (secrets),
// if a server echoed one, are removed from everything kept.
func readAPIError(resp *http.Response, secrets []string) *APIError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorRead))
	body = redact(body, secrets)
	e := &APIError{Status: resp.StatusCode}
	var env errorEnvelope
	if json.Unmarshal(body, &env) == nil {
		if obj := env.errorFrom(); obj != nil {
			e = apiErrorFrom(resp.StatusCode, obj, secrets)
		}
	}
	e.Body = truncate(string(body), maxErrorBody)
	e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return e
}

// parseRetryAfter reads a Retry-After header: delay seconds (fractions
// accepted) or an HTTP date. Anything unreadable or in the past is zero.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs != secs || secs <= 0 { // NaN or not in the future
			return 0
		}
		if secs >= maxRetryAfter.Seconds() {
			return maxRetryAfter
		}
		d = time.Duration(secs * float64(time.Second))
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// rawText renders a JSON scalar as text: strings unquoted, numbers as
// written, null and absent as "".
func rawText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// redact removes every occurrence of each of keys from b. b itself is
// not modified.
func redact(b []byte, keys []string) []byte {
	for _, key := range keys {
		if key != "" && bytes.Contains(b, []byte(key)) {
			b = bytes.ReplaceAll(b, []byte(key), []byte("[redacted]"))
		}
	}
	return b
}
