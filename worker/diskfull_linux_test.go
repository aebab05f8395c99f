//go:build linux

package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// On a real disk that is full (a tmpfs of 32 MiB, filled by another
// file), the worker and its server beside it: the worker holds its
// samples, says why in its heartbeat, and once the other file is gone
// extracts every sample on its first delivery. Needs the right to mount
// a tmpfs (root).
func TestExtractionOnAFullDisk(t *testing.T) {
	t.Parallel()
	disk := t.TempDir()
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=32m"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(disk, syscall.MNT_DETACH) })
	out, serverDir := filepath.Join(disk, "out"), filepath.Join(disk, "server")
	if err := os.MkdirAll(serverDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ballast := filepath.Join(disk, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 31<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	m, ps := extractionRun(40, out)
	b := setupPrompts(t, m, ps, provision.Options{})
	url := simtest.Serve(t, simulator.Config{Model: "test-model", Speed: 1000, HiddenStatesPath: serverDir,
		HiddenLayerIDs: []int{2, 30}, HiddenSize: 16, HiddenDType: "BF16", VocabSize: 1000})
	hb := b.heartbeats(t)
	w, _ := b.start(t, worker.Config{Window: 4, Heartbeat: 50 * time.Millisecond, DiskReserve: 2 << 20}, url)
	brokertest.Eventually(t, 15*time.Second, func() bool {
		h := hb.last()
		return h != nil && strings.HasPrefix(h.PausedReason, "disk full: "+filepath.Join(out, "hidden_states"))
	}, "a heartbeat paused for the full disk")
	if n := b.resultCount(t); n != 0 {
		t.Fatalf("%d results while the disk was full", n)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	b.waitSettled(t, 30*time.Second)
	waitCounted(t, int64(len(ps)), w)
	checkExtracted(t, b, ps, out, serverDir)
	for id, r := range b.results(t) {
		if r.Attempts != 1 {
			t.Errorf("sample %s took %d deliveries", id, r.Attempts)
		}
	}
}
