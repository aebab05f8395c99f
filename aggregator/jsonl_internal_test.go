package aggregator

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// Opening an output file cuts off a torn last line, loads the unit of
// every complete line (a line without "sample" is sample 0), and refuses
// a complete line that is not one of aerie's, naming it by FILE:LINE.
func TestOpenJSONLLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	good := `{"id":"a","sample":0,"content":"x"}` + "\n" + `{"id":"a","sample":2}` + "\n" + `{"id":"b"}` + "\r\n"
	if err := os.WriteFile(path, []byte(good+`{"id":"c","sample":1,"con`), 0o644); err != nil {
		t.Fatal(err)
	}
	var seen []string
	j, err := openJSONL(path, func(_ string, line []byte) error {
		seen = append(seen, string(line))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []schema.Unit{{ID: "a"}, {ID: "a", Sample: 2}, {ID: "b"}} {
		if ok, err := j.has(u.Key()); !ok || err != nil {
			t.Errorf("unit %+v not loaded", u)
		}
	}
	if j.count() != 3 || len(seen) != 3 {
		t.Errorf("%d units, %d lines seen; want 3", j.count(), len(seen))
	}
	// A rewrite keeps the lines it is not told to change.
	if err := j.rewrite(map[string]bool{schema.Unit{ID: "a", Sample: 2}.Key(): true},
		map[string][]byte{schema.Unit{ID: "b"}.Key(): []byte(`{"id":"b","sample":0}` + "\n")}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if got, _ := os.ReadFile(path); string(got) != `{"id":"a","sample":0,"content":"x"}`+"\n"+`{"id":"b","sample":0}`+"\n" {
		t.Errorf("after the rewrite the file holds %q", got)
	}

	for name, bad := range map[string]string{
		"no id":             `{"sample":1}`,
		"negative sample":   `{"id":"x","sample":-1}`,
		"fractional sample": `{"id":"x","sample":1.5}`,
		"garbled after id":  `{"id":"x","sample":1,"content":"cut`,
		"blank":             ``,
	} {
		path := filepath.Join(dir, "bad.jsonl")
		if err := os.WriteFile(path, []byte(good+bad+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := openJSONL(path, nil)
		if err == nil || !strings.Contains(err.Error(), path+":4:") {
			t.Errorf("%s: error %v, want one naming %s:4", name, err, path)
		}
		// The same when the line's decoding is its only check.
		_, err = openCompletions(path, 4, nil, nil)
		if err == nil || !strings.Contains(err.Error(), path+":4: not an aerie output line") {
			t.Errorf("%s, decoded: error %v, want one naming %s:4", name, err, path)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, []byte(good+bad+"\n")) {
			t.Errorf("%s: the file was changed to %q", name, got)
		}
	}
}
