package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/aerie-dev/aerie/fsmode"
)

const (
	// minFree is the free space under which the disk check fails
	// whatever the run's size: the aggregator fsyncs every batch, and a
	// full disk stops it, and the run with it.
	minFree = 1 << 30
	// assumedTokens stands in for max_tokens when the run leaves it unset.
	assumedTokens = 4000
	// bytesPerOutputToken is the output estimate per generated token: the
	// answer's text (about four bytes a token) as escaped JSON, plus its
	// share of each line's metadata. The prompt each line repeats is
	// counted apart, from the prompts file (session.promptBytes).
	bytesPerOutputToken = 5
)

// runDir is where the run's output goes: DataDir/Run, or DataDir alone
// when no run is given.
func (s *session) runDir() string {
	if s.cfg.Run == "" {
		return s.cfg.DataDir
	}
	return filepath.Join(s.cfg.DataDir, s.cfg.Run)
}

// checkDataDir creates (if needed) the run's output directory, writes,
// syncs and removes a file there, and removes the directories it created.
func checkDataDir(ctx context.Context, s *session) Result {
	if s.cfg.DataDir == "" {
		return skip("no data directory given (--data-dir)")
	}
	dir := s.runDir()
	probeErr, err := await(ctx, func() error { return probeWritable(dir) })
	if err != nil {
		return fail("check the volume (a hung network mount?)", "no answer from %s: %v", dir, err)
	}
	if probeErr != nil {
		return fail("create it and give the aggregator's user write access (sudo install -d -o aerie -g aerie DIR), or check --data-dir",
			"unwritable data dir %s: %v", dir, probeErr)
	}
	who := currentUser()
	detail := fmt.Sprintf("created, synced and removed a file in %s as user %s", dir, who)
	if os.Geteuid() == 0 {
		detail += " (root writes anywhere: the aggregator's own user may not)"
	}
	return pass("%s", detail)
}

// probeWritable makes sure a file can be created in dir, creating dir if
// needed, and leaves nothing behind.
func probeWritable(dir string) (err error) {
	created := missingDirs(dir)
	defer func() {
		for _, d := range created { // deepest first
			rmErr := os.Remove(d)
			if rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && err == nil {
				err = fmt.Errorf("remove the directory created for the test: %w", rmErr)
			}
		}
	}()
	if err := os.MkdirAll(dir, fsmode.Dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".aerie-doctor-*")
	if err != nil {
		return err
	}
	_, werr := f.WriteString("aerie doctor write test\n")
	serr := f.Sync()
	cerr := f.Close()
	rerr := os.Remove(f.Name())
	return errors.Join(werr, serr, cerr, rerr)
}

// missingDirs lists dir and those of its parents that do not exist,
// deepest first.
func missingDirs(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, os.ErrNotExist) {
			return out
		}
		out = append(out, d)
		if filepath.Dir(d) == d {
			return out
		}
	}
}

// existingParent is dir, or its nearest parent that exists.
func existingParent(dir string) string {
	d := filepath.Clean(dir)
	for {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			return d
		}
		d = filepath.Dir(d)
	}
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Geteuid())
}

// freeResult carries freeBytes' answer out of await.
type freeResult struct {
	path string
	free uint64
	err  error
}

// measureFree measures the free space of the file system dir is (or
// will be) on, within ctx; a result is the check's when it cannot.
func measureFree(ctx context.Context, dir string) (freeResult, *Result) {
	res, err := await(ctx, func() freeResult {
		p := existingParent(dir)
		free, err := freeBytes(p)
		return freeResult{p, free, err}
	})
	if err == nil {
		err = res.err
	}
	if errors.Is(err, errors.ErrUnsupported) {
		r := skip("free space cannot be measured on this system")
		return res, &r
	}
	if err != nil {
		r := fail("check the volume (a hung network mount?)", "free space of %s: %v", dir, err)
		return res, &r
	}
	return res, nil
}

// checkDiskSpace compares the free space under the data directory with
// what the rest of the run may write: remaining prompts x max_tokens (or
// 4,000 when unset) x 5 bytes. It fails under 1 GiB and warns when the
// estimate does not fit.
func checkDiskSpace(ctx context.Context, s *session) Result {
	if s.cfg.DataDir == "" {
		return skip("no data directory given (--data-dir)")
	}
	if s.done["data-dir"] != Pass {
		return skip("data directory not usable (see data-dir)")
	}
	dir := s.runDir()
	res, bad := measureFree(ctx, dir)
	if bad != nil {
		return *bad
	}
	free := fmt.Sprintf("%s free on the file system of %s", formatBytes(res.free), res.path)
	if res.free < minFree {
		return fail("free space there, or point --data-dir at a larger volume", "%s: under 1 GiB", free)
	}
	size, ok := s.size()
	if !ok {
		return pass("%s; expected output unknown (no consumer, manifest or prompts file to count)", free)
	}
	answer, answerHow := s.answerBytes()
	prompt := s.promptBytes()
	expected := uint64(size.requests)*answer + uint64(size.units)*prompt
	estimate := fmt.Sprintf("the run may write up to %s (%s x %s", formatBytes(expected), size, answerHow)
	if prompt > 0 {
		estimate += fmt.Sprintf(", and %s of prompt a line", formatBytes(prompt))
	}
	estimate += ")"
	if expected > res.free {
		return warn("free space there, or point --data-dir at a larger volume", "%s; %s", free, estimate)
	}
	return pass("%s; %s", free, estimate)
}
