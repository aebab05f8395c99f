//go:build linux

package upgrade_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// beforeFeatures is the last commit before runs named the features they
// need: its workers read manifests of version 1 only, and answer what
// they are given.
const beforeFeatures = "26a953a19d795a63ed10eadde118d6d52ee83991"

// Versions the builds are stamped with.
const (
	releaseVersion = "release-26a953a"
	todayVersion   = "upgrade-today"
	newerVersion   = "upgrade-newer"
)

// buildDir holds the binaries every test of the package shares.
var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aerie-upgrade-builds-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build is one binary, built once for the package.
type build struct {
	once sync.Once
	bin  string
	skip string // why it cannot be built here: the test skips
	err  error
}

func (b *build) get(t *testing.T, make func() (bin, skip string, err error)) string {
	t.Helper()
	b.once.Do(func() { b.bin, b.skip, b.err = make() })
	if b.skip != "" {
		t.Skip(b.skip)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

var todayBuild, newerBuild, releaseBuild build

// repoRoot is the top of the git work tree the test runs in.
func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse --show-toplevel: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// goBuild builds ./cmd/aerie of the module in dir into out, stamped with
// version (both the variable of today's builds and that of releases
// before it, which the linker ignores where absent).
func goBuild(dir, out, version string, tags ...string) error {
	args := []string{"build", "-o", out, "-ldflags",
		"-X github.com/aerie-dev/aerie/schema.buildVersion=" + version + " -X main.version=" + version}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "./cmd/aerie")...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, b)
	}
	return nil
}

// today is a build of the source under test.
func today(t *testing.T) string {
	return todayBuild.get(t, func() (string, string, error) {
		root, err := repoRoot()
		if err != nil {
			return "", "", err
		}
		bin := filepath.Join(buildDir, "aerie-today")
		return bin, "", goBuild(root, bin, todayVersion)
	})
}

// newer is a build of the source under test that also implements the
// test-only feature (the aerie_testfeature tag).
func newer(t *testing.T) string {
	return newerBuild.get(t, func() (string, string, error) {
		root, err := repoRoot()
		if err != nil {
			return "", "", err
		}
		bin := filepath.Join(buildDir, "aerie-newer")
		return bin, "", goBuild(root, bin, newerVersion, "aerie_testfeature")
	})
}

// release is the build of beforeFeatures, from a git worktree of that
// commit in the build directory, removed once built. A clone without
// that commit (a shallow one) skips the tests that need it.
func release(t *testing.T) string {
	return releaseBuild.get(t, func() (string, string, error) {
		root, err := repoRoot()
		if err != nil {
			return "", "", err
		}
		if exec.Command("git", "-C", root, "cat-file", "-e", beforeFeatures+"^{commit}").Run() != nil {
			return "", "commit " + beforeFeatures + ", the release before feature checks, is not in this clone (a shallow clone?): fetch it to run the tests of old binaries", nil
		}
		tree := filepath.Join(buildDir, "release-tree")
		if b, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", tree, beforeFeatures).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("git worktree add %s: %v\n%s", beforeFeatures, err, b)
		}
		defer func() {
			_ = exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).Run()
			_ = exec.Command("git", "-C", root, "worktree", "prune").Run()
		}()
		bin := filepath.Join(buildDir, "aerie-release")
		return bin, "", goBuild(tree, bin, releaseVersion)
	})
}
