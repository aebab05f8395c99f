package simulator_test

import (
	"net/http"
	"testing"

	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// A simulator answers its first /health with 200: Serve serves nothing
// before its engine runs, so that a preflight that checks health at once
// does not meet a 503.
func TestHealthyFromTheFirstRequest(t *testing.T) {
	for range 20 {
		url := simtest.Serve(t, simulator.Config{Model: "m"})
		resp, err := http.Get(url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("first /health: %s, want 200", resp.Status)
		}
	}
}
