package openai

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// ServerMetrics reads /metrics at the server's root with the client's
// key, and reports a refusal as an APIError without the key in it.
func TestServerMetrics(t *testing.T) {
	const key = "sk-metrics-secret"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":"Unauthorized `+r.Header.Get("Authorization")+`"}`, http.StatusUnauthorized)
			return
		}
		w.Write([]byte("vllm:num_requests_running 3\n"))
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL + "/v1", APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	body, err := c.ServerMetrics(context.Background())
	if err != nil || string(body) != "vllm:num_requests_running 3\n" {
		t.Fatalf("got %q, %v", body, err)
	}
	wrong, err := New(Config{BaseURL: srv.URL, APIKey: "sk-other-key"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.ServerMetrics(context.Background())
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("with a wrong key: %v, want a 401 APIError", err)
	}
	if strings.Contains(err.Error(), "sk-other-key") {
		t.Fatalf("the key is in the error: %v", err)
	}
}
