package hfdataset

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func rowOf(i int) Row {
	n := 1 + i%37
	r := Row{InputIDs: make([]int64, n), LossMask: make([]int, n)}
	for k := range n {
		r.InputIDs[k] = int64(i*1000 + k)
		r.LossMask[k] = (i + k) % 2
	}
	return r
}

// A saved dataset reads back row for row, across record batches, and
// its state.json and dataset_info.json are what load_from_disk reads.
func TestWriteReadBack(t *testing.T) {
	dir := t.TempDir()
	const n = 2500 // three record batches
	if err := Write(dir, n, func(i int) (Row, error) { return rowOf(i), nil }); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range n {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		want := rowOf(i)
		if !slices.Equal(got.InputIDs, want.InputIDs) || !slices.Equal(got.LossMask, want.LossMask) {
			t.Fatalf("row %d: %+v, want %+v", i, got, want)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last row: %v", err)
	}
	var st struct {
		DataFiles []struct{ Filename string } `json:"_data_files"`
		Format    string                      `json:"_format_type"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, StateFile))
	if err := json.Unmarshal(b, &st); err != nil || len(st.DataFiles) != 1 || st.DataFiles[0].Filename != "data-00000-of-00001.arrow" || st.Format != "torch" {
		t.Fatalf("state.json: %s (%v)", b, err)
	}
	var info struct {
		Features map[string]struct {
			Type string `json:"_type"`
		} `json:"features"`
	}
	b, _ = os.ReadFile(filepath.Join(dir, InfoFile))
	if err := json.Unmarshal(b, &info); err != nil || info.Features["input_ids"].Type != "List" || info.Features["seq_len"].Type != "Value" {
		t.Fatalf("dataset_info.json: %s (%v)", b, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("%d files in the dataset, want the data file, state.json and dataset_info.json", len(entries))
	}
}

// Saving again replaces the data files; one of the earlier save that
// is no longer named is removed.
func TestWriteAgainReplaces(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "data-00001-of-00002.arrow")
	if err := os.WriteFile(stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, 3, func(i int) (Row, error) { return rowOf(i), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale data file: %v", err)
	}
}

// A dataset without the columns extraction needs is refused, naming
// what it has.
func TestReadNamesMissingColumns(t *testing.T) {
	if _, err := Open(t.TempDir()); err == nil {
		t.Fatal("a directory without state.json opened")
	}
}
