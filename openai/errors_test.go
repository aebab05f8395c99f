package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestStatusClasses(t *testing.T) {
	tests := []struct {
		status int
		want   Class
	}{
		{400, Permanent}, {404, Permanent}, {413, Permanent}, {422, Permanent}, {418, Permanent},
		{401, Auth}, {403, Auth},
		{408, Transient}, {409, Transient}, {425, Transient}, {429, Transient},
		{500, Transient}, {502, Transient}, {503, Transient}, {504, Transient}, {507, Transient},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				fmt.Fprintf(w, `{"error": {"message": "failed", "type": "SomeError", "param": null, "code": %d}}`, tt.status)
			})
			for name, call := range map[string]func() error{
				"stream": func() error { _, err := c.ChatStream(testContext(t), userMessage("q"), nil); return err },
				"whole":  func() error { _, err := c.Chat(testContext(t), userMessage("q")); return err },
			} {
				err := call()
				wantClass(t, err, tt.want)
				var apiErr *APIError
				if !errors.As(err, &apiErr) || apiErr.Status != tt.status {
					t.Fatalf("%s: error %#v is not an *APIError with status %d", name, err, tt.status)
				}
				if apiErr.InStream() {
					t.Errorf("%s: an error status before streaming counts as InStream", name)
				}
			}
		})
	}
}

func TestErrorBodyShapes(t *testing.T) {
	tests := []struct {
		name, body string
		want       APIError
		wantText   string
	}{
		{
			name:     "vLLM context length",
			body:     `{"error": {"message": "This model's maximum context length is 8192 tokens.", "type": "BadRequestError", "param": null, "code": 400}}`,
			want:     APIError{Status: 400, Type: "BadRequestError", Message: "This model's maximum context length is 8192 tokens.", Code: "400"},
			wantText: "status 400 BadRequestError: This model's maximum context length is 8192 tokens.",
		},
		{
			name:     "string code and param",
			body:     `{"error": {"message": "too long", "type": "BadRequestError", "param": "messages", "code": "context_length_exceeded"}}`,
			want:     APIError{Status: 400, Type: "BadRequestError", Message: "too long", Code: "context_length_exceeded", Param: "messages"},
			wantText: "status 400 BadRequestError: too long (code context_length_exceeded)",
		},
		{
			name:     "top-level object error",
			body:     `{"object": "error", "message": "max_tokens must be at least 1", "type": "BadRequestError", "param": null, "code": 400}`,
			want:     APIError{Status: 400, Type: "BadRequestError", Message: "max_tokens must be at least 1", Code: "400"},
			wantText: "status 400 BadRequestError: max_tokens must be at least 1",
		},
		{
			name:     "error as a string",
			body:     `{"error": "bad gateway"}`,
			want:     APIError{Status: 400, Message: "bad gateway"},
			wantText: "status 400: bad gateway",
		},
		{
			name:     "HTML from a proxy",
			body:     "<html>\n<body>oops</body>\n</html>",
			want:     APIError{Status: 400},
			wantText: "status 400: <html> <body>oops</body> </html>",
		},
		{
			name:     "empty body",
			body:     "",
			want:     APIError{Status: 400},
			wantText: "status 400: Bad Request",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, tt.body)
			})
			_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
			var apiErr *APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v is not an *APIError", err)
			}
			got := *apiErr
			if got.Body != tt.body {
				t.Errorf("Body %q, want %q", got.Body, tt.body)
			}
			got.Body = ""
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
			want := "chat completion to " + srv.URL + "/v1/chat/completions: " + tt.wantText
			if err.Error() != want {
				t.Errorf("error text\n got %q\nwant %q", err, want)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"5", 5 * time.Second},
		{" 2 ", 2 * time.Second},
		{"0.5", 500 * time.Millisecond},
		{"0", 0},
		{"-3", 0},
		{"NaN", 0},
		{"soon", 0},
		{"1e300", maxRetryAfter},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.header, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.header, got, tt.want)
		}
	}

	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error": {"message": "queue full", "type": "TooManyRequests", "code": 429}}`)
	})
	_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	wantClass(t, err, Transient)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.RetryAfter != 7*time.Second {
		t.Fatalf("error %#v has no 7s RetryAfter", err)
	}
	if !strings.Contains(err.Error(), "retry after 7s") {
		t.Errorf("error %q does not mention the hint", err)
	}
}

func TestErrorBodyBounded(t *testing.T) {
	message := strings.Repeat("é", 1<<20) // multi-byte, so truncation must respect runes
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error": {"message": %q}}`, message)
	})
	_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	wantClass(t, err, Transient)
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v is not an *APIError", err)
	}
	if n := len(apiErr.Body); n > maxErrorBody+len("…") || n < maxErrorBody-4 {
		t.Errorf("Body is %d bytes, want about %d", n, maxErrorBody)
	}
	if !utf8.ValidString(apiErr.Body) {
		t.Error("Body was cut inside a UTF-8 sequence")
	}
	if n := len(err.Error()); n > 2*maxErrorMessage {
		t.Errorf("error text is %d bytes", n)
	}
}

func TestAPIKeyNeverInErrors(t *testing.T) {
	echo := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			// A careless proxy that echoes the request headers.
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error": {"message": "denied for %s", "type": "AuthError"}}`, r.Header.Get("Authorization"))
		}
	}
	var errs []error
	for _, status := range []int{401, 403, 500} {
		c, _ := newTestServer(t, echo(status))
		_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
		var apiErr *APIError
		if !errors.As(err, &apiErr) || !strings.Contains(apiErr.Message, "Bearer [redacted]") {
			t.Fatalf("status %d: error %#v did not reach the server with the key", status, err)
		}
		if strings.Contains(apiErr.Body, testKey) || strings.Contains(apiErr.Message, testKey) {
			t.Errorf("status %d: APIError fields hold the key", status)
		}
		errs = append(errs, err, c.Health(testContext(t)))
		_, err = c.Chat(testContext(t), userMessage("q"))
		errs = append(errs, err)
	}
	// The key echoed inside a stream: as an error object, in a bad chunk.
	for _, data := range []string{`{"error": {"message": "denied for %s", "code": 401}}`, `{"oops": "%s"`} {
		c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
			startStream(w)
			send(w, fmt.Sprintf(data, r.Header.Get("Authorization")))
		})
		_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
		if err == nil || !strings.Contains(err.Error(), "Bearer [redacted]") {
			t.Fatalf("error %v does not show the redacted echo", err)
		}
		errs = append(errs, err)
	}
	// Transport failures: nothing listens, and a server that is too slow.
	c, srv := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {})
	srv.Close()
	_, err := c.ChatStream(testContext(t), userMessage("q"), nil)
	errs = append(errs, err)
	c, _ = newTestServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
		func(cfg *Config) { cfg.RequestTimeout = 50 * time.Millisecond })
	_, err = c.ChatStream(context.Background(), userMessage("q"), nil)
	errs = append(errs, err)

	for _, err := range errs {
		if err == nil {
			t.Fatal("missing error")
		}
		for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
			if strings.Contains(text, testKey) {
				t.Errorf("error shows the key: %s", text)
			}
		}
	}
}
