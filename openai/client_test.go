package openai

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNewBaseURL(t *testing.T) {
	good := []struct{ in, root string }{
		{"http://127.0.0.1:8000", "http://127.0.0.1:8000"},
		{"http://127.0.0.1:8000/", "http://127.0.0.1:8000"},
		{"http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"},
		{"http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"},
		{" https://gpu-7.example:443/proxy/vllm/v1 ", "https://gpu-7.example:443/proxy/vllm"},
		{"http://[::1]:8000", "http://[::1]:8000"},
	}
	for _, tt := range good {
		c, err := New(Config{BaseURL: tt.in})
		if err != nil {
			t.Errorf("New(%q): %v", tt.in, err)
			continue
		}
		if c.ep.root != tt.root || c.ep.chat != tt.root+"/v1/chat/completions" ||
			c.ep.models != tt.root+"/v1/models" || c.ep.health != tt.root+"/health" {
			t.Errorf("New(%q) endpoints %+v, want root %q", tt.in, c.ep, tt.root)
		}
	}
	bad := []struct{ in, why string }{
		{"", "empty"},
		{"127.0.0.1:8000", "scheme"},
		{"localhost:8000", "scheme"},
		{"ftp://h", "scheme"},
		{"http://", "missing host"},
		{"http://user:secret@h:8000", "credentials"},
		{"http://h:8000/v1?x=1", "query"},
		{"http://h:8000/%zz", "invalid"},
		{"http://user:secret@h:8000/%zz", "invalid"},
	}
	for _, tt := range bad {
		_, err := New(Config{BaseURL: tt.in})
		if err == nil {
			t.Errorf("New(%q) succeeded", tt.in)
			continue
		}
		shown := strings.Replace(tt.in, "user:secret", "[redacted]", 1)
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", shown)) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("New(%q) error %q, want it to quote the value and say %q", tt.in, err, tt.why)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("error shows the credentials: %q", err)
		}
	}
	for name, cfg := range map[string]Config{
		"FirstTokenTimeout": {BaseURL: "http://h", FirstTokenTimeout: -time.Second},
		"IdleTimeout":       {BaseURL: "http://h", IdleTimeout: -time.Second},
		"RequestTimeout":    {BaseURL: "http://h", RequestTimeout: -time.Second},
	} {
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "negative "+name) {
			t.Errorf("negative %s: error %v", name, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	c, err := New(Config{BaseURL: "http://h:8000"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (timeLimits{firstToken: 30 * time.Minute, idle: 5 * time.Minute}); c.limits != want {
		t.Errorf("default time limits %v, want %v", c.limits, want)
	}
	if c.http.Timeout != 0 {
		t.Errorf("default client has an overall Timeout %v", c.http.Timeout)
	}
	tr, ok := c.http.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("default transport is %T", c.http.Transport)
	}
	if tr.MaxIdleConnsPerHost < 256 || tr.ResponseHeaderTimeout != 0 || tr.TLSHandshakeTimeout == 0 || !tr.DisableCompression {
		t.Errorf("default transport %+v", tr)
	}
	custom := &http.Client{}
	c, err = New(Config{BaseURL: "http://h:8000", HTTPClient: custom,
		FirstTokenTimeout: time.Hour, IdleTimeout: time.Second, RequestTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if want := (timeLimits{firstToken: time.Hour, idle: time.Second, total: time.Minute}); c.http != custom || c.limits != want {
		t.Errorf("explicit settings were replaced: %v", c)
	}
	if want := "FirstTokenTimeout: 1h0m0s, IdleTimeout: 1s, RequestTimeout: 1m0s"; !strings.Contains(c.String(), want) {
		t.Errorf("String() = %q, want it to show %q", c.String(), want)
	}
}

func TestStringsHideKey(t *testing.T) {
	cfg := Config{BaseURL: "http://h:8000", APIKey: testKey}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		cfg.String(), fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprintf("%v", &cfg),
		c.String(), fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c),
	} {
		if strings.Contains(s, testKey) || !strings.Contains(s, "[redacted]") {
			t.Errorf("String output %q", s)
		}
	}
}

func TestHealth(t *testing.T) {
	status := http.StatusOK
	var path string
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.Path
		w.WriteHeader(status)
	}, func(cfg *Config) { cfg.BaseURL += "/v1/" })
	if err := c.Health(testContext(t)); err != nil {
		t.Fatalf("Health: %v", err)
	}
	if path != "/health" {
		t.Errorf("Health asked %q", path)
	}
	status = http.StatusServiceUnavailable
	err := c.Health(testContext(t))
	wantClass(t, err, Transient)
	if !strings.Contains(err.Error(), "health check of ") || !strings.Contains(err.Error(), "status 503") {
		t.Errorf("error %q", err)
	}
}

// deadlineRecorder records the deadline of each request's context.
type deadlineRecorder struct {
	next      http.RoundTripper
	deadlines []time.Duration // time left when the request was sent; -1 if none
}

func (d *deadlineRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	left := time.Duration(-1)
	if dl, ok := r.Context().Deadline(); ok {
		left = time.Until(dl)
	}
	d.deadlines = append(d.deadlines, left)
	return d.next.RoundTrip(r)
}

func TestProbeTimeouts(t *testing.T) {
	rec := &deadlineRecorder{next: http.DefaultTransport}
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object": "list", "data": []}`)
	}, func(cfg *Config) { cfg.HTTPClient = &http.Client{Transport: rec} })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.Health(context.Background())
	_, _ = c.Models(context.Background())
	_ = c.Health(ctx)
	if len(rec.deadlines) != 3 {
		t.Fatalf("%d requests recorded", len(rec.deadlines))
	}
	for i, left := range rec.deadlines[:2] {
		if left <= 9*time.Second || left > 10*time.Second {
			t.Errorf("request %d without caller deadline had %v left, want 10s", i, left)
		}
	}
	if left := rec.deadlines[2]; left <= 50*time.Second {
		t.Errorf("caller deadline of a minute became %v", left)
	}

	hang, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	wantClass(t, hang.Health(short), Canceled)
}

func TestModels(t *testing.T) {
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" || r.Header.Get("Authorization") != "Bearer "+testKey {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"object": "list", "data": [
			{"id": "moonshotai/Kimi-K2.5", "object": "model", "created": 1, "owned_by": "vllm", "root": "x", "parent": null, "max_model_len": 262144, "permission": []},
			{"id": "lora-a", "object": "model"}]}`)
	})
	got, err := c.Models(testContext(t))
	if err != nil {
		t.Fatalf("Models: %v", err)
	}
	want := []Model{{ID: "moonshotai/Kimi-K2.5", MaxModelLen: 262144, OwnedBy: "vllm"}, {ID: "lora-a"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Models = %+v, want %+v", got, want)
	}

	bad, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"data": {`) })
	_, err = bad.Models(testContext(t))
	wantClass(t, err, Transient)

	denied, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error": {"message": "invalid key", "type": "AuthenticationError", "code": 401}}`, http.StatusUnauthorized)
	})
	_, err = denied.Models(testContext(t))
	wantClass(t, err, Auth)
}
