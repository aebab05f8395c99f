package simulator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/openai"
)

// TestClientClassifiesInjectedFaults checks that the project's client
// calls each injected fault what a worker should make of it: everything
// is worth a retry except the context length error.
func TestClientClassifiesInjectedFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		faults     Faults
		stream     bool
		want       openai.Class
		status     int // of the *APIError, 0 for none
		errType    string
		retryAfter time.Duration
		message    string // in the API error, or else in the error
	}{
		{name: "429", faults: Faults{Rate429: 1}, stream: true, want: openai.Transient,
			status: 429, errType: "RateLimitError", retryAfter: time.Second},
		{name: "500", faults: Faults{Rate500: 1}, stream: true, want: openai.Transient,
			status: 500, errType: "InternalServerError"},
		{name: "503", faults: Faults{Rate503: 1}, want: openai.Transient,
			status: 503, errType: "ServiceUnavailableError", retryAfter: time.Second},
		{name: "400", faults: Faults{Rate400: 1}, stream: true, want: openai.Permanent,
			status: 400, errType: "BadRequestError", message: "This model's maximum context length is 262144 tokens. However, you requested"},
		{name: "disconnect in a stream", faults: Faults{DisconnectRate: 1}, stream: true, want: openai.Transient,
			message: "unexpected EOF"},
		{name: "disconnect without streaming", faults: Faults{DisconnectRate: 1}, want: openai.Transient,
			message: "EOF"},
		{name: "hang", faults: Faults{HangRate: 1}, stream: true, want: openai.Transient,
			message: "request timeout exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := startServer(t, Config{Speed: 1000, OutputMedian: 50, OutputSigma: 0.1, Faults: tt.faults})
			// Only the hang should meet the timeout.
			timeout := 10 * time.Second
			if tt.faults.HangRate > 0 {
				timeout = 300 * time.Millisecond
			}
			client, err := openai.New(openai.Config{BaseURL: ts.url, RequestTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			req := openai.ChatRequest{Messages: []openai.Message{{Role: "user", Content: tt.name}}, MaxTokens: 100}
			if tt.stream {
				_, err = client.ChatStream(context.Background(), req, nil)
			} else {
				_, err = client.Chat(context.Background(), req)
			}
			if got := openai.Classify(err); got != tt.want {
				t.Fatalf("Classify(%v) = %v, want %v", err, got, tt.want)
			}
			var apiErr *openai.APIError
			if errors.As(err, &apiErr) != (tt.status != 0) {
				t.Fatalf("error %v: want an API error: %v", err, tt.status != 0)
			}
			if tt.status == 0 && !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q, want it to contain %q", err, tt.message)
			}
			if tt.status != 0 && (apiErr.Status != tt.status || apiErr.Type != tt.errType ||
				apiErr.RetryAfter != tt.retryAfter || !strings.Contains(apiErr.Message, tt.message)) {
				t.Errorf("API error %+v, want status %d, type %s, retry after %v, message with %q",
					apiErr, tt.status, tt.errType, tt.retryAfter, tt.message)
			}
		})
	}
}

// TestSlowFirstByte checks that a slowed request still succeeds, its
// first byte late by SlowFirstByte over Speed.
func TestSlowFirstByte(t *testing.T) {
	t.Parallel()
	cfg := Config{Speed: 1000, OutputMedian: 20, OutputSigma: 0.1,
		Faults: Faults{SlowFirstByte: 300 * time.Second, SlowFirstByteRate: 1}}
	ts := startServer(t, cfg)
	client, err := openai.New(openai.Config{BaseURL: ts.url})
	if err != nil {
		t.Fatal(err)
	}
	comp, err := client.ChatStream(context.Background(), openai.ChatRequest{
		Messages: []openai.Message{{Role: "user", Content: "slow"}}}, nil)
	if err != nil {
		t.Fatalf("slowed request failed: %v", err)
	}
	if want := 300 * time.Millisecond; comp.TTFT < want {
		t.Errorf("first token after %v, want at least %v", comp.TTFT, want)
	}
	if f := ts.Stats().Faults; f.SlowFirstByte != 1 {
		t.Errorf("fault counts %+v, want one slow first byte", f)
	}
}
