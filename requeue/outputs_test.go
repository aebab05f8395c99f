package requeue

import (
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// An output file's units: a line without "sample" (written before
// samples existed) is sample 0, and a sample after the id counts.
func TestOutputUnits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys, found, err := outputUnits(dir + "/none.jsonl")
	if err != nil || found || len(keys) != 0 {
		t.Fatalf("missing file: %v, %v, %v", keys, found, err)
	}
	path := writeLines(t, dir, "out.jsonl", `{"id": "a"}`, `{"id": "b", "content": "x"}`,
		`{"id": "b", "sample": 1, "content": "x"}`, `{"id": "c", "sample": 0}`)
	appendTo(t, path, `{"id": "torn", "con`)
	keys, found, err = outputUnits(path)
	want := []schema.Unit{{ID: "a"}, {ID: "b"}, {ID: "b", Sample: 1}, {ID: "c"}}
	if err != nil || !found || len(keys) != len(want) {
		t.Fatalf("units %q, %v, %v", keys, found, err)
	}
	for _, u := range want {
		if !keys.has(u.Key()) {
			t.Errorf("%+v missing from %q", u, keys)
		}
	}
	bad := writeLines(t, dir, "bad.jsonl", `{"id": "a", "sample": "one"}`)
	if _, _, err := outputUnits(bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl:1:") {
		t.Errorf("error %v, want one naming bad.jsonl:1", err)
	}
}
