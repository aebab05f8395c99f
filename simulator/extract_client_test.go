//go:build unix

package simulator_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/hiddenstates"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// One sample's extraction end to end, as a worker does it: aerie's client
// asks, waits for the connector's lock, and publishes the verified file
// under speculators' name; a server without extraction says so.
func TestExtractThroughClient(t *testing.T) {
	store, out := t.TempDir(), t.TempDir()
	url := simtest.Serve(t, simulator.Config{Speed: 1000, HiddenStatesPath: store, HiddenLayerIDs: []int{2, 4}, HiddenSize: 32})
	c, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := []int64{11, 12, 13, 14, 15}
	x, err := c.Extract(ctx, simulator.DefaultModel, ids)
	if err != nil {
		t.Fatal(err)
	}
	release, err := hiddenstates.WaitWritten(ctx, x.Path, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(out, hiddenstates.Name(3))
	s, err := hiddenstates.Publish(x.Path, dst, hiddenstates.Want{TokenIDs: ids, Layers: 2, Hidden: 32, DType: "BF16"})
	release()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dst); err != nil || st.Size() != s.Bytes || s.Shape != [3]int{5, 2, 32} {
		t.Errorf("published %v (%v), summary %+v", st, err, s)
	}

	plain := simtest.Serve(t, simulator.Config{Speed: 1000})
	c, err = openai.New(openai.Config{BaseURL: plain})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Extract(ctx, simulator.DefaultModel, ids); !errors.Is(err, openai.ErrNoExtraction) {
		t.Errorf("a server without extraction: %v", err)
	}
}
