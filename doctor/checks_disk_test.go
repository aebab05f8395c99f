package doctor_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/simulator"
)

// A regular file where a directory of the path should be: MkdirAll fails
// even for root, which permissions would not stop.
func TestUnwritableDataDir(t *testing.T) {
	t.Parallel()
	b := setup(t)
	file := filepath.Join(b.dir, "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := b.cfg
	cfg.DataDir = filepath.Join(file, "data")
	rep := run(t, cfg)
	expect(t, rep, "data-dir", doctor.Fail,
		"unwritable data dir "+filepath.Join(file, "data", testRun),
		"not a directory",
		"fix:check --data-dir")
	expect(t, rep, "disk-space", doctor.Skip, "see data-dir")
}

func TestDataDirExistingIsKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runDir := filepath.Join(b.cfg.DataDir, testRun)
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	rep := run(t, b.cfg)
	expect(t, rep, "data-dir", doctor.Pass, "created, synced and removed a file in "+runDir)
	entries, err := os.ReadDir(runDir)
	if err != nil {
		t.Fatalf("the existing run directory is gone: %v", err)
	}
	if len(entries) != 0 {
		t.Errorf("left behind in %s: %v", runDir, entries)
	}
}

// A run whose answers may be far larger than the disk warns, naming the
// numbers behind the estimate.
func TestDiskSpaceShortWarns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queueRun(t, b.js, "huge", 1<<40, provision.Options{})
	cfg := b.cfg
	cfg.Run, cfg.PromptsFile = "huge", ""
	rep := run(t, cfg)
	expect(t, rep, "disk-space", doctor.Warn,
		"3 answers (not yet done) x 1099511627776 max_tokens x 5 bytes",
		"fix:point --data-dir at a larger volume")
}

// Before produce, the size checks count what the run will generate from
// the prompts file and the run's flags: every turn with --turns all,
// every sample, and token ids; also when the backend refuses the API
// key and the context check cannot run.
func TestSizeCountsTurnsSamplesAndTokenIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.cfg
	cfg.Run, cfg.Units, cfg.Model = "", "", testModel
	// Three conversations: 2, 3 and 1 turns to generate.
	cfg.PromptsFile = writePrompts(t, b.dir,
		`{"id": "c1", "messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]}`,
		`{"id": "c2", "messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}, {"role": "user", "content": "q3"}]}`,
		`{"id": "c3", "prompt": "one question"}`)
	cfg.MaxTokens = 1000

	rep := run(t, cfg)
	expect(t, rep, "disk-space", doctor.Pass, "3 answers (prompts in the prompts file) x 1000 max_tokens x 5 bytes")

	cfg.TurnsAll, cfg.Samples, cfg.ReturnTokenIDs = true, 2, true
	rep = run(t, cfg)
	expect(t, rep, "disk-space", doctor.Pass, "12 answers for 6 lines (every turn of the prompts file, 2 samples each) x 1000 max_tokens x 12 bytes with token ids")
	expect(t, rep, "store-space", doctor.Pass, "6 earlier turns")

	// A backend that refuses the key: no model list, no context check,
	// and still the prompts are counted.
	cfg.Backend = startSim(t, simulator.Config{Model: testModel, APIKey: "sekret"})
	rep = run(t, cfg)
	expect(t, rep, "context-length", doctor.Skip, "3 prompts counted")
	expect(t, rep, "completion", doctor.Skip, "the backend's model list failed")
	expect(t, rep, "disk-space", doctor.Pass, "12 answers for 6 lines")
}
