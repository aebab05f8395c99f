package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
)

// aerie aggregate --http-listen serves the run's live page and its state
// from the start, before the run has begun.
func TestAggregateServesLivePage(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	natsAddr, pageAddr := freeAddr(t), freeAddr(t)
	start(t, bin, "server", "--listen", natsAddr, "--store", filepath.Join(dir, "nats"))
	waitTCP(t, natsAddr)
	start(t, bin, "aggregate", "--nats", "nats://"+natsAddr, "--run", "live-run", "--data-dir", filepath.Join(dir, "data"), "--http-listen", pageAddr)
	waitTCP(t, pageAddr)

	var state struct {
		Run string `json:"run"`
	}
	brokertest.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + pageAddr + "/api/state")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&state) == nil
	}, "the state at /api/state")
	if state.Run != "live-run" {
		t.Errorf("state names run %q, want live-run", state.Run)
	}
	resp, err := http.Get("http://" + pageAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || len(b) == 0 {
		t.Errorf("page: %s, %d bytes", resp.Status, len(b))
	}
}
