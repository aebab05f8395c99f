package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// aerie run writes the run's report and prints its path; aerie report
// writes it again wherever --out says (beside the outputs by default),
// from the files alone.
func TestReportCommand(t *testing.T) {
	bin := buildAerie(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	prompts := filepath.Join(dir, "p.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "30", "--out", prompts).wait(t, time.Minute)
	p := aerie(t, bin, "run", "--run", "rep", "--prompts", prompts, "--data-dir", data, "--sim-speed", "2000", "--event-interval", "100ms")
	p.wait(t, 5*time.Minute)
	written := filepath.Join(data, "rep", "report.html")
	if !strings.Contains(p.stdout.String(), "report       "+written) {
		t.Errorf("aerie run does not name its report %s:\n%s", written, p.stdout.String())
	}
	if _, err := os.Stat(written); err != nil {
		t.Errorf("aerie run wrote no report: %v", err)
	}

	out := filepath.Join(dir, "elsewhere", "report.html")
	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		t.Fatal(err)
	}
	r := aerie(t, bin, "report", "--run", "rep", "--data-dir", data, "--out", out)
	if code := r.exit(t, time.Minute); code != 0 || !strings.Contains(r.stdout.String(), "30 completed, 0 failed): "+out) {
		t.Fatalf("aerie report: exit %d\nstdout: %s\nstderr: %s", code, r.stdout.String(), r.stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `<svg id="eta"`) || !strings.Contains(string(b), "<th>completed</th><td>30 (") {
		t.Errorf("report at %s lacks its ETA chart or its count", out)
	}
	if st, err := os.Stat(out); err == nil && st.Mode().Perm() != 0o600 {
		t.Errorf("report mode %v, want 0600 under the default umask", st.Mode().Perm())
	}

	if err := os.Remove(written); err != nil {
		t.Fatal(err)
	}
	r = aerie(t, bin, "report", "--run", "rep", "--data-dir", data)
	if code := r.exit(t, time.Minute); code != 0 || !strings.Contains(r.stdout.String(), "): "+written) {
		t.Errorf("aerie report without --out: exit %d, want it to write %s\nstdout: %s\nstderr: %s", code, written, r.stdout.String(), r.stderr.String())
	}
	if _, err := os.Stat(written); err != nil {
		t.Errorf("aerie report without --out wrote nothing at %s: %v", written, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "--run", "nosuch", "--data-dir", data}, "no directory " + filepath.Join(data, "nosuch")},
		{[]string{"report", "--run", "rep", "--data-dir", data, "extra"}, `unexpected argument "extra"`},
		{[]string{"report", "--data-dir", data}, "--run is required"},
	} {
		p := aerie(t, bin, tc.args...)
		if code := p.exit(t, time.Minute); code != 1 || !strings.Contains(p.stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, want 1 and %q:\n%s", tc.args, code, tc.want, p.stderr.String())
		}
	}
}
