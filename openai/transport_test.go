package openai

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestChatStreamKeepsConnectionsForWindow: a worker holding a window of
// streams open, round after round, reuses its connections rather than
// closing those above an idle limit and dialing them again. Each round
// holds every stream open at once (the server answers none before all
// have arrived), so every connection is in use and then idle together.
func TestChatStreamKeepsConnectionsForWindow(t *testing.T) {
	const window, rounds = 600, 3
	var mu sync.Mutex
	arrived := 0
	gate := make(chan struct{})
	url, dials := serveCountingDials(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		g := gate
		if arrived == window {
			close(gate)
			gate, arrived = make(chan struct{}), 0
		}
		mu.Unlock()
		select {
		case <-g:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: "+chunk{field: "content", text: "a", finish: "stop"}.String()+"\n\ndata: [DONE]\n\n")
	})
	c, err := New(Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, window)
		for range window {
			wg.Go(func() {
				if _, err := c.ChatStream(ctx, userMessage("q"), nil); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round+1, err)
		}
	}
	if n := dials(); n != window {
		t.Errorf("%d rounds of %d streams at once dialed %d connections, want %d", rounds, window, n, window)
	}
}
