package worker_test

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/hiddenstates"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
	"github.com/aerie-dev/aerie/worker"
)

// extractionRun is a hidden-states run of n samples of 1 to 40 tokens,
// its files going to out: 2 layers of 16 values, BF16.
func extractionRun(n int, out string) (schema.Manifest, []schema.Prompt) {
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	ps := make([]schema.Prompt, n)
	var tokens int64
	for i := range ps {
		k := 1 + rng.IntN(40)
		ids, mask := make([]int64, k), make([]int, k)
		for t := range ids {
			ids[t] = int64(rng.IntN(1000))
			mask[t] = t % 2
		}
		ps[i] = schema.Prompt{ID: strconv.Itoa(i), InputIDs: ids, LossMask: mask}
		tokens += int64(k)
	}
	m := schema.Manifest{Run: "hs", Task: schema.TaskHiddenStates,
		Extraction: &schema.Extraction{LayerIDs: []int{2, 30}, HiddenSize: 16, DType: "BF16", Tokens: tokens, Out: out}}
	return m, ps
}

// extractionSim serves a simulator that extracts into its own directory,
// with faults.
func extractionSim(t *testing.T, faults simulator.FileFaults) (url, dir string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "server")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return simtest.Serve(t, simulator.Config{Model: "test-model", Speed: 1000, HiddenStatesPath: dir,
		HiddenLayerIDs: []int{2, 30}, HiddenSize: 16, HiddenDType: "BF16", VocabSize: 1000, FileFaults: faults}), dir
}

// checkExtracted checks that out holds exactly one verified file per
// sample, named by its stored result with its checksum, and that the
// server's directory is left empty.
func checkExtracted(t *testing.T, b *bundle, ps []schema.Prompt, out, serverDir string) {
	t.Helper()
	results := b.results(t)
	if len(results) != len(ps) {
		t.Fatalf("%d results for %d samples", len(results), len(ps))
	}
	for _, p := range ps {
		r := results[p.ID]
		if r == nil || r.HiddenStates == nil {
			t.Fatalf("sample %s: result %+v", p.ID, r)
		}
		hs := r.HiddenStates
		path := filepath.Join(out, filepath.FromSlash(hs.File))
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("sample %s: %v", p.ID, err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != hs.SHA256 || int64(len(data)) != hs.Bytes {
			t.Errorf("sample %s: the file differs from its result", p.ID)
		}
		if _, err := hiddenstates.VerifyFile(path, hiddenstates.Want{TokenIDs: p.InputIDs, Layers: 2, Hidden: 16, DType: "BF16"}); err != nil {
			t.Errorf("sample %s: %v", p.ID, err)
		}
		if hs.Index != mustAtoi(t, p.ID) || !slices.Equal(hs.Shape, []int{len(p.InputIDs), 2, 16}) || !slices.Equal(r.InputIDs, p.InputIDs) || !slices.Equal(r.LossMask, p.LossMask) {
			t.Errorf("sample %s: result %+v, file %+v", p.ID, r, hs)
		}
	}
	entries, err := os.ReadDir(filepath.Join(out, schema.HiddenStatesDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(ps) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%d files in the output for %d samples: %s", len(entries), len(ps), strings.Join(names, " "))
	}
	left, _ := os.ReadDir(serverDir)
	if len(left) != 0 {
		t.Errorf("%d files left in the server's directory, e.g. %s", len(left), left[0].Name())
	}
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Every sample's file is verified and published under its idx, its
// result names it, and the server's directory is left empty.
func TestExtractionPublishesEverySample(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	m, ps := extractionRun(60, out)
	b := setupPrompts(t, m, ps, provision.Options{})
	url, serverDir := extractionSim(t, simulator.FileFaults{})
	w, _ := b.start(t, worker.Config{Window: 8}, url)
	b.waitSettled(t, 30*time.Second)
	waitCounted(t, int64(len(ps)), w)
	checkExtracted(t, b, ps, out, serverDir)
}

// Files that are missing, cut, of other tokens or with a NaN are never
// published: each attempt is retried until a good file comes, and the
// bad files are removed.
func TestExtractionRetriesBadFiles(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	m, ps := extractionRun(80, out)
	m.Policy.MaxAttempts = 20
	b := setupPrompts(t, m, ps, provision.Options{MaxDeliver: 30})
	url, serverDir := extractionSim(t, simulator.FileFaults{Missing: 0.05, Cut: 0.05, NaN: 0.05, OtherTokens: 0.05})
	w, _ := b.start(t, worker.Config{Window: 8, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, BreakerThreshold: 1000}, url)
	b.waitSettled(t, 60*time.Second)
	waitCounted(t, int64(len(ps)), w)
	checkExtracted(t, b, ps, out, serverDir)
	if n := len(b.stored(t, schema.DeadStream)); n != 0 {
		t.Errorf("%d dead letters", n)
	}
	// About a fifth of the attempts got a bad file.
	if st := w.Stats(); st.Retry < 5 {
		t.Errorf("%d attempts retried: the faults were not met", st.Retry)
	}
}

// A file an earlier attempt published (its worker killed before it
// stored the result) is not asked for again: it is verified and named.
func TestExtractionKeepsAPublishedFile(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	m, ps := extractionRun(5, out)
	b := setupPrompts(t, m, ps, provision.Options{})
	url, serverDir := extractionSim(t, simulator.FileFaults{})
	// Sample 3's file, as a worker killed after publishing left it.
	dir := filepath.Join(out, schema.HiddenStatesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, hiddenstates.Name(3)))
	if err != nil {
		t.Fatal(err)
	}
	layers := []int{2, 30}
	if _, err := hiddenstates.Encode(f, ps[3].InputIDs, 2, 16, "BF16", func(tok int64, pos, layer, h int) float32 {
		return hiddenstates.Synthetic(tok, pos, layers[layer], h)
	}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	w, _ := b.start(t, worker.Config{Window: 2}, url)
	b.waitSettled(t, 30*time.Second)
	waitCounted(t, int64(len(ps)), w)
	checkExtracted(t, b, ps, out, serverDir)
	// The simulator marks what it answers; sample 3 was not asked.
	if r := b.results(t)["3"]; r.Simulated {
		t.Errorf("sample 3 was asked again: %+v", r)
	}
}

// A disk without room for the next sample holds the worker without
// spending the sample's attempts, says so in its heartbeat, and the
// worker goes on by itself once there is room.
func TestExtractionWaitsForRoom(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	m, ps := extractionRun(6, out)
	b := setupPrompts(t, m, ps, provision.Options{})
	url, serverDir := extractionSim(t, simulator.FileFaults{})
	var room atomic.Bool
	hb := b.heartbeats(t)
	w, _ := b.start(t, worker.Config{Window: 2, Heartbeat: 50 * time.Millisecond, DiskFree: func(string) (int64, error) {
		if room.Load() {
			return 1 << 40, nil
		}
		return 1 << 20, nil
	}}, url)
	var reason string
	brokertest.Eventually(t, 10*time.Second, func() bool {
		h := hb.last()
		if h != nil && strings.HasPrefix(h.PausedReason, "disk full") {
			reason = h.PausedReason
			return true
		}
		return false
	}, "a heartbeat paused for the disk")
	if !strings.Contains(reason, out) || !strings.Contains(reason, "free space there") {
		t.Errorf("paused reason: %s", reason)
	}
	if n := b.resultCount(t); n != 0 {
		t.Fatalf("%d results stored while the disk was full", n)
	}
	room.Store(true)
	b.waitSettled(t, 30*time.Second)
	waitCounted(t, int64(len(ps)), w)
	checkExtracted(t, b, ps, out, serverDir)
	for id, r := range b.results(t) {
		if r.Attempts != 1 {
			t.Errorf("sample %s took %d deliveries", id, r.Attempts)
		}
	}
}

// Two workers writing to one disk, each beside a server of its own,
// publish each sample once: every file is named by its result.
func TestExtractionTwoWorkersOneDisk(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	m, ps := extractionRun(120, out)
	m.Policy.MaxAttempts = 20
	b := setupPrompts(t, m, ps, provision.Options{MaxDeliver: 30})
	faults := simulator.FileFaults{Cut: 0.05, NaN: 0.05}
	url1, dir1 := extractionSim(t, faults)
	url2, dir2 := extractionSim(t, faults)
	cfg := worker.Config{Window: 6, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond, BreakerThreshold: 1000}
	w1, _ := b.start(t, cfg, url1)
	w2, _ := b.start(t, cfg, url2)
	b.waitSettled(t, 60*time.Second)
	waitCounted(t, int64(len(ps)), w1, w2)
	checkExtracted(t, b, ps, out, dir1)
	if left, _ := os.ReadDir(dir2); len(left) != 0 {
		t.Errorf("%d files left in the second server's directory", len(left))
	}
	if w1.Stats().Completed == 0 || w2.Stats().Completed == 0 {
		t.Errorf("one worker did all the work: %d and %d", w1.Stats().Completed, w2.Stats().Completed)
	}
}

// A worker's own output directory (--out, a shared disk mounted at
// another path on its host) wins over the one the run was produced
// with.
func TestExtractionWorkerOut(t *testing.T) {
	t.Parallel()
	produced, here := filepath.Join(t.TempDir(), "elsewhere"), filepath.Join(t.TempDir(), "here")
	m, ps := extractionRun(10, produced)
	b := setupPrompts(t, m, ps, provision.Options{})
	url, serverDir := extractionSim(t, simulator.FileFaults{})
	w, _ := b.start(t, worker.Config{Window: 4, Out: here}, url)
	b.waitSettled(t, 30*time.Second)
	waitCounted(t, int64(len(ps)), w)
	checkExtracted(t, b, ps, here, serverDir)
	if _, err := os.Stat(produced); !os.IsNotExist(err) {
		t.Errorf("the produced directory was written: %v", err)
	}
}
