package main_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Everything aerie gen-prompts, run and export create is the owner's
// alone by default (files 0600, directories 0700, the embedded NATS
// store, locks and events included); --umask 0022, or AERIE_UMASK, makes
// outputs readable by all; an export over a file keeps that file's mode.
func TestUmask(t *testing.T) {
	bin := buildAerie(t)
	for _, tc := range []struct {
		name      string
		env, args []string
		file, dir fs.FileMode
	}{
		{name: "default", file: 0o600, dir: 0o700},
		{name: "flag", args: []string{"--umask", "022"}, file: 0o644, dir: 0o755},
		{name: "env", env: []string{"AERIE_UMASK=0022"}, file: 0o644, dir: 0o755},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			prompts := filepath.Join(root, "in", "prompts.jsonl")
			data := filepath.Join(root, "data")
			out := filepath.Join(root, "sharegpt.jsonl")
			for _, args := range [][]string{
				{"gen-prompts", "--count", "20", "--out", prompts},
				{"run", "--run", "m", "--prompts", prompts, "--data-dir", data, "--sim-speed", "2000", "--event-interval", "100ms"},
				{"export", "--run", "m", "--data-dir", data, "--format", "sharegpt", "--allow-simulated", "--out", out},
			} {
				aerieEnv(t, bin, tc.env, append(args, tc.args...)...).wait(t, 5*time.Minute)
			}
			for path, want := range map[string]fs.FileMode{
				filepath.Join(root, "in"): tc.dir, prompts: tc.file,
				data: tc.dir, filepath.Join(data, "m"): tc.dir,
				filepath.Join(data, "m", "completions.jsonl"): tc.file,
				filepath.Join(data, "m", "failed.jsonl"):      tc.file,
				filepath.Join(data, "m", "events.jsonl"):      tc.file,
				out:                                           tc.file,
				out + ".export.json":                          tc.file,
			} {
				checkMode(t, path, want)
			}
			if tc.name == "default" {
				// Nothing under the data directory, the NATS store and
				// the lock files included, is open to group or others.
				n := 0
				err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					info, err := d.Info()
					if err != nil {
						return err
					}
					n++
					if info.Mode().Perm()&0o077 != 0 {
						t.Errorf("%s has mode %04o, open to group or others", path, info.Mode().Perm())
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(filepath.Join(data, "nats", "jetstream")); err != nil || n < 10 {
					t.Errorf("walked %d entries, expected the NATS store among them: %v", n, err)
				}
			}

			// An export or prompts file written over an existing file
			// keeps its mode.
			for _, f := range []string{out, prompts} {
				if err := os.Chmod(f, 0o640); err != nil {
					t.Fatal(err)
				}
			}
			aerieEnv(t, bin, tc.env, append([]string{"export", "--run", "m", "--data-dir", data, "--format", "sharegpt", "--allow-simulated", "--out", out}, tc.args...)...).wait(t, time.Minute)
			aerieEnv(t, bin, tc.env, append([]string{"gen-prompts", "--count", "20", "--out", prompts}, tc.args...)...).wait(t, time.Minute)
			checkMode(t, out, 0o640)
			checkMode(t, prompts, 0o640)
			if left, _ := filepath.Glob(filepath.Join(root, "in", "*.tmp")); len(left) > 0 {
				t.Errorf("temporary files left behind: %v", left)
			}
		})
	}
}

// A --umask or AERIE_UMASK that is not an octal mask up to 0777 is
// refused, saying what a good one looks like.
func TestUmaskRefusesBadValues(t *testing.T) {
	bin := buildAerie(t)
	out := filepath.Join(t.TempDir(), "p.jsonl")
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{args: []string{"--umask", "0888"}, want: `umask "0888" is not octal`},
		{args: []string{"--umask", "1777"}, want: "above 0777"},
		{args: []string{"--umask", ""}, want: "empty"},
		{env: []string{"AERIE_UMASK=u=rwx"}, want: `AERIE_UMASK: umask "u=rwx" is not octal`},
	} {
		p := aerieEnv(t, bin, tc.env, append([]string{"gen-prompts", "--count", "1", "--out", out}, tc.args...)...)
		if code := p.exit(t, time.Minute); code != 1 || !strings.Contains(p.stderr.String(), tc.want) {
			t.Errorf("%v %v: exit %d, want 1 and %q in:\n%s", tc.env, tc.args, code, tc.want, p.stderr.String())
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written despite a bad umask", out)
	}
}

func checkMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s has mode %04o, want %04o", path, got, want)
	}
}
