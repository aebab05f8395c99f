package requeue

import (
	"slices"
	"strings"
	"testing"
)

func TestReadIDs(t *testing.T) {
	t.Parallel()
	file := writeLines(t, t.TempDir(), "ids", "plain id", `  "quoted"  `, "", `{"id": 7}`, "plain id", `{"reason": "x", "id": "obj"}`,
		`{"id": "obj", "sample": 2}`, `{"sample": 0, "id": "obj"}`, `{"id": "obj", "sample": 2}`)
	got, err := readIDs(file)
	if err != nil {
		t.Fatal(err)
	}
	want := []selection{{id: "plain id"}, {id: "quoted"}, {id: "7"}, {id: "obj"}, {id: "obj", sample: 2, one: true}, {id: "obj", one: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("selections %+v, want %+v", got, want)
	}
	bad := writeLines(t, t.TempDir(), "ids", "ok", `{"no": "id"}`)
	if _, err := readIDs(bad); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Fatalf("error %v, want one naming line 2", err)
	}
	bad = writeLines(t, t.TempDir(), "ids", "ok", "fine", `{"id": "x", "sample": -1}`)
	if _, err := readIDs(bad); err == nil || !strings.Contains(err.Error(), ":3:") || !strings.Contains(err.Error(), "sample") {
		t.Fatalf("error %v, want one naming line 3 and its sample", err)
	}
}
