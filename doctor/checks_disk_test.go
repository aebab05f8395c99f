package doctor_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/provision"
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
		"3 prompts not yet done x 1099511627776 max_tokens x 5 bytes",
		"fix:point --data-dir at a larger volume")
}
