package chaos

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

func TestWorkerHeartbeats(t *testing.T) {
	_, _, js := brokertest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	free := 0
	for _, hb := range []schema.Heartbeat{
		{Run: "r", Worker: "w1", Time: time.Now(), Window: 40, InFlight: 3, FreeSlots: &free, Paused: true, PausedReason: "backend down"},
		{Run: "r", Worker: "w2", Time: time.Now(), Window: 20, TailHold: true},
		{Run: "other", Worker: "w9", Time: time.Now()},
	} {
		data, err := json.Marshal(hb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, schema.HeartbeatSubject(hb.Run, hb.Worker), data); err != nil {
			t.Fatal(err)
		}
	}
	got := workerHeartbeats(ctx, js, "r")
	for _, want := range []string{"worker w1", "in flight 3, free slots 0", "paused true backend down", "worker w2", "tail hold true"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "w9") {
		t.Errorf("another run's worker is listed:\n%s", got)
	}
}

func TestLogsNaming(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "worker-1.log"), []byte("a\nlevel=WARN msg=x id=c0000032\nb\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "aggregator-1.log"), []byte("id=c0000106 written\n"), 0o644)
	got := logsNaming(dir, []string{"c0000032", "c0000106"})
	for _, want := range []string{"worker-1.log: level=WARN msg=x id=c0000032", "aggregator-1.log: id=c0000106 written"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, ": a\n") {
		t.Errorf("a line naming no id is quoted:\n%s", got)
	}
	if logsNaming(dir, []string{"c9"}) != "" {
		t.Error("lines quoted for an id no log names")
	}
}
