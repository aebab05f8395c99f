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
)

// The time limits in these tests. Servers that must not trip the idle
// timeout send something every tick, a twentieth of it. The idle timeout
// itself is a whole second because a machine under load can stall a
// test process for a good fraction of a second, and after such a stall
// the timer may fire before the bytes waiting in the socket are read.
const (
	idle = time.Second
	tick = 50 * time.Millisecond
	// steadyFor is how long a slow but steady answer lasts: more than ten
	// idle timeouts.
	steadyFor = 11 * idle
)

// longContext is a caller context far longer than any limit under test,
// so that a limit that fails to fire shows up as Canceled, not as a hang.
func longContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// wantLimit fails the test unless err is a Transient error whose text
// contains want.
func wantLimit(t *testing.T, err error, want string) {
	t.Helper()
	wantClass(t, err, Transient)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to contain %q", err, want)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("error %q wraps a context error, which belongs to the caller", err)
	}
}

// steadyStream sends a first token, then for steadyFor sends something
// every tick: first only keep-alive comments (no token for several idle
// timeouts), then tokens written in two halves. Then it finishes.
func steadyStream(w http.ResponseWriter, r *http.Request) {
	startStream(w)
	send(w, chunk{role: true}.String())
	start := time.Now()
	for time.Since(start) < steadyFor/2 {
		if !waitOrDone(r, tick) {
			return
		}
		_, _ = io.WriteString(w, ": keep-alive\n\n")
		w.(http.Flusher).Flush()
	}
	for time.Since(start) < steadyFor {
		event := "data: " + chunk{field: "content", text: "x"}.String() + "\n\n"
		for _, half := range []string{event[:len(event)/2], event[len(event)/2:]} {
			if !waitOrDone(r, tick) {
				return
			}
			_, _ = io.WriteString(w, half)
			w.(http.Flusher).Flush()
		}
	}
	send(w, chunk{finish: "stop"}.String())
	send(w, "[DONE]")
}

// A long answer that keeps arriving is never cut: only silence is. A
// total timeout (the only limit there was) cut it at the same value.
func TestSlowSteadyStreamOutlivesIdleTimeout(t *testing.T) {
	t.Parallel()
	t.Run("idle timeout only", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestServer(t, steadyStream, func(cfg *Config) { cfg.IdleTimeout = idle })
		got, err := c.ChatStream(longContext(t), userMessage("q"), nil)
		if err != nil {
			t.Fatalf("ChatStream: %v", err)
		}
		if got.Latency < steadyFor || got.Content == "" || got.FinishReason != "stop" {
			t.Errorf("got %+v, want an answer that took at least %v", got, steadyFor)
		}
	})
	t.Run("request timeout still caps it", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestServer(t, steadyStream, func(cfg *Config) { cfg.IdleTimeout, cfg.RequestTimeout = idle, idle })
		_, err := c.ChatStream(longContext(t), userMessage("q"), nil)
		wantLimit(t, err, fmt.Sprintf("request not finished within %v (request timeout exceeded)", idle))
	})
}

func TestIdleTimeoutAfterFirstToken(t *testing.T) {
	t.Parallel()
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		send(w, chunk{field: "content", text: "a"}.String())
		<-r.Context().Done() // the engine is stuck
	}, func(cfg *Config) { cfg.IdleTimeout = idle })
	start := time.Now()
	_, err := c.ChatStream(longContext(t), userMessage("q"), nil)
	wantLimit(t, err, fmt.Sprintf("reading stream after 1 chunks: no byte from the server for %v after the first token (idle timeout exceeded)", idle))
	if d := time.Since(start); d < idle {
		t.Errorf("gave up after %v, before the idle timeout", d)
	}
}

func TestFirstTokenTimeout(t *testing.T) {
	t.Parallel()
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	keepAlives := func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		for waitOrDone(r, tick) {
			_, _ = io.WriteString(w, ": keep-alive\n\n")
			w.(http.Flusher).Flush()
		}
	}
	limits := func(cfg *Config) { cfg.FirstTokenTimeout, cfg.IdleTimeout = idle, idle }
	want := fmt.Sprintf("no first token from the server within %v of sending the request (first-token timeout exceeded)", idle)
	t.Run("keep-alives are not a first token", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestServer(t, keepAlives, limits)
		start := time.Now()
		_, err := c.ChatStream(longContext(t), userMessage("q"), nil)
		wantLimit(t, err, "reading stream after 0 chunks: "+want)
		if d := time.Since(start); d < idle {
			t.Errorf("gave up after %v, before the first-token timeout", d)
		}
	})
	t.Run("no headers", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestServer(t, hang, limits)
		_, err := c.ChatStream(longContext(t), userMessage("q"), nil)
		wantLimit(t, err, want)
	})
	t.Run("no headers, not streaming", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestServer(t, hang, limits)
		_, err := c.Chat(longContext(t), userMessage("q"))
		wantLimit(t, err, want)
	})
}

// A request queued on the server gets no headers and then only
// keep-alives for longer than the idle timeout: that is the first-token
// timeout's to judge.
func TestQueuedRequestIsNotIdle(t *testing.T) {
	t.Parallel()
	const queued = idle * 3 / 2
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if !waitOrDone(r, queued) {
			return
		}
		startStream(w)
		for start := time.Now(); time.Since(start) < queued; {
			if !waitOrDone(r, tick) {
				return
			}
			_, _ = io.WriteString(w, ": keep-alive\n\n")
			w.(http.Flusher).Flush()
		}
		send(w, chunk{field: "content", text: "a", finish: "stop"}.String())
		send(w, "[DONE]")
	}, func(cfg *Config) { cfg.FirstTokenTimeout, cfg.IdleTimeout = 10*2*queued, idle })
	got, err := c.ChatStream(longContext(t), userMessage("q"), nil)
	if err != nil {
		t.Fatalf("ChatStream: %v", err)
	}
	if got.TTFT < 2*queued || got.Content != "a" {
		t.Errorf("got %+v", got)
	}
}

// wholeAnswer writes a non-streaming answer in pieces: the start at
// once, then the content one byte every tick for three idle timeouts,
// then the rest. stall, if set, stops after the start.
func wholeAnswer(stall bool) http.HandlerFunc {
	const prefix = `{"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "`
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, prefix)
		w.(http.Flusher).Flush()
		if stall {
			<-r.Context().Done()
			return
		}
		for start := time.Now(); time.Since(start) < 3*idle; {
			if !waitOrDone(r, tick) {
				return
			}
			_, _ = io.WriteString(w, "x")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, `"}}]}`)
	}
}

func TestIdleTimeoutWholeResponse(t *testing.T) {
	t.Parallel()
	want := fmt.Sprintf("reading response: no byte from the server for %v while reading the response (idle timeout exceeded)", idle)
	limits := func(cfg *Config) { cfg.IdleTimeout = idle }
	t.Run("Chat, stalled body", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestServer(t, wholeAnswer(true), limits)
		_, err := c.Chat(longContext(t), userMessage("q"))
		wantLimit(t, err, want)
	})
	t.Run("ChatStream answered as JSON, stalled body", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestServer(t, wholeAnswer(true), limits)
		_, err := c.ChatStream(longContext(t), userMessage("q"), nil)
		wantLimit(t, err, want)
	})
	t.Run("Chat, slow but steady body", func(t *testing.T) {
		t.Parallel()
		c, _ := newTestServer(t, wholeAnswer(false), limits)
		got, err := c.Chat(longContext(t), userMessage("q"))
		if err != nil {
			t.Fatalf("Chat: %v", err)
		}
		if got.Latency < 3*idle || !strings.HasPrefix(got.Content, "xx") {
			t.Errorf("got %+v, want an answer that took at least %v", got, 3*idle)
		}
	})
}

func TestRequestTimeoutCapsChat(t *testing.T) {
	t.Parallel()
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
		func(cfg *Config) { cfg.RequestTimeout = idle })
	_, err := c.Chat(longContext(t), userMessage("q"))
	wantLimit(t, err, fmt.Sprintf("request not finished within %v (request timeout exceeded)", idle))
}

// The caller's own deadline is Canceled, not one of the client's limits.
func TestCallerDeadlineIsCanceled(t *testing.T) {
	t.Parallel()
	c, _ := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		send(w, chunk{field: "content", text: "a"}.String())
		<-r.Context().Done()
	}, func(cfg *Config) { cfg.IdleTimeout = time.Minute })
	ctx, cancel := context.WithTimeout(context.Background(), idle)
	defer cancel()
	_, err := c.ChatStream(ctx, userMessage("q"), nil)
	wantClass(t, err, Canceled)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q does not wrap context.DeadlineExceeded", err)
	}
}
