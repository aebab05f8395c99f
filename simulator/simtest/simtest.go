// Package simtest serves aerie's vLLM simulator on a loopback port for
// tests, stopped when the test ends, and proxies in front of a backend
// that change what it is asked.
package simtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/aerie-dev/aerie/simulator"
)

// Serve serves a simulator configured by cfg on a random loopback port
// until the test ends, and returns its base URL. A simulator that fails
// while serving fails the test.
func Serve(t testing.TB, cfg simulator.Config) string {
	t.Helper()
	sim, err := simulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("simulator: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}

// ChatProxy serves, until the test ends, a proxy in front of the backend
// at backendURL that lets edit see and change the JSON body of every
// chat completion request: a backend that ignores a parameter is one
// whose proxy deletes it.
func ChatProxy(t testing.TB, backendURL string, edit func(body map[string]any)) string {
	t.Helper()
	target, err := url.Parse(backendURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			raw, _ := io.ReadAll(r.Body)
			var body map[string]any
			_ = json.Unmarshal(raw, &body)
			edit(body)
			raw, _ = json.Marshal(body)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Starting serves, until the test ends, a proxy in front of the backend
// at backendURL that answers /health with 503 its first healthFails
// times, as vLLM does while it loads its model, and its first chatFails
// chat completions with status chatStatus, as a server shedding load
// does. It returns its URL and the count of chat completions asked for.
func Starting(t testing.TB, backendURL string, healthFails, chatFails int64, chatStatus int) (string, *atomic.Int64) {
	t.Helper()
	target, err := url.Parse(backendURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var health atomic.Int64
	chats := new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/health" && health.Add(1) <= healthFails:
			http.Error(w, "loading", http.StatusServiceUnavailable)
		case r.URL.Path == "/v1/chat/completions" && chats.Add(1) <= chatFails:
			http.Error(w, `{"error": {"message": "busy"}}`, chatStatus)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, chats
}
