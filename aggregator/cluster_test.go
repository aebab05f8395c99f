package aggregator_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/logtest"
	"github.com/aerie-dev/aerie/schema"
)

// An aggregator that starts on a cluster where more results wait than
// one fetch takes writes them all. A replicated consumer sends each
// message only once its delivery is replicated, but the status that ends
// a fetch filled by count at once: a fetch bounded in bytes got that
// status first, gave up, and lost the batch to the AckWait, every time,
// so that such an aggregator wrote nothing, for ever.
func TestBacklogOnClusterIsWritten(t *testing.T) {
	const n = 600
	_, _, js := brokertest.ProvisionedCluster(t)
	brokertest.Queue(t, js, schema.Manifest{Run: run, Total: n}, nil)
	publishResults(t, js, ids(0, n))
	dir := t.TempDir()
	var logs logtest.Buffer
	began := time.Now()
	a, stop := start(t, js, aggregator.Config{DataDir: dir, ExitWhenDone: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	select {
	case <-a.Done():
	case <-time.After(2 * time.Minute):
		t.Fatalf("the aggregator did not finish a run whose %d results were all stored: %+v\n%s", n, a.Last(), logs.String())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d results written in %v", n, time.Since(began).Round(time.Millisecond))
	if strings.Contains(logs.String(), "fetch failed") {
		t.Errorf("a fetch failed:\n%s", logs.String())
	}
	writtenOnce(t, readLines(t, filepath.Join(dir, run, aggregator.CompletionsFile)), ids(0, n))
}
