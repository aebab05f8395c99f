package export_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"

	"github.com/aerie-dev/aerie/export"
)

// readParquetWithArrow reads shards with Apache Arrow's Go implementation
// (testdata/parquetread, a module of its own), not with the library
// aerie writes them with.
func readParquetWithArrow(t *testing.T, paths []string) []struct {
	Schema  string `json:"schema"`
	Rows    int64  `json:"rows"`
	FirstID string `json:"first_id"`
} {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the Arrow reader")
	}
	cmd := exec.Command("go", append([]string{"run", "."}, paths...)...)
	cmd.Dir = filepath.Join("testdata", "parquetread")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("arrow-go reader: %v\n%s", err, stderr.String())
	}
	var shards []struct {
		Schema  string `json:"schema"`
		Rows    int64  `json:"rows"`
		FirstID string `json:"first_id"`
	}
	if err := json.Unmarshal(out, &shards); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return shards
}

// A Parquet export is a Hugging Face dataset directory: shards named
// train-0000K-of-0000N.parquet under data/, each at most --shard-size,
// that another library reads with the specforge row's columns and every
// row; and a card whose YAML header parses and names every shard.
func TestParquetDataset(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ds")
	opts := export.Options{Format: export.FormatParquet, Run: "turns", Drop: []string{}, ShardSize: 900, Version: "test"}
	sum, err := export.WriteParquet(context.Background(), export.Files("testdata/turns"), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if sum.RowsWritten != 6 || len(sum.Shards) < 2 {
		t.Fatalf("%d rows in %d shards; want 6 rows in several shards of 900 bytes", sum.RowsWritten, len(sum.Shards))
	}
	var paths []string
	for k, s := range sum.Shards {
		want := "data/train-0000" + string(rune('0'+k)) + "-of-0000" + string(rune('0'+len(sum.Shards))) + ".parquet"
		if s != want {
			t.Errorf("shard %d is %s, want %s", k, s, want)
		}
		p := filepath.Join(dir, s)
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() > 900 && k < len(sum.Shards)-1 {
			t.Logf("shard %s: %d bytes (one row larger than the bound stands alone)", s, info.Size())
		}
		paths = append(paths, p)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "data"))
	if len(entries) != len(sum.Shards) {
		t.Errorf("data/ holds %d files, want the %d shards alone", len(entries), len(sum.Shards))
	}
	var rows int64
	for _, s := range readParquetWithArrow(t, paths) {
		rows += s.Rows
		for _, col := range []string{"- id: type=utf8\n", "- conversations: type=list<element: struct<role: utf8, content: utf8, reasoning_content: utf8 nullable>>\n", "- status: type=utf8\n"} {
			if !strings.Contains(s.Schema, col) {
				t.Errorf("schema lacks %q:\n%s", col, s.Schema)
			}
		}
	}
	if rows != int64(sum.RowsWritten) {
		t.Errorf("arrow-go read %d rows, the export wrote %d", rows, sum.RowsWritten)
	}

	card, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(string(card), "---\n", 3)
	if len(parts) != 3 || parts[0] != "" {
		t.Fatalf("the card does not start with a YAML header:\n%s", card)
	}
	var header struct {
		Configs []struct {
			ConfigName string `yaml:"config_name"`
			DataFiles  []struct {
				Split string   `yaml:"split"`
				Path  []string `yaml:"path"`
			} `yaml:"data_files"`
		} `yaml:"configs"`
		DatasetInfo struct {
			Features []struct {
				Name  string `yaml:"name"`
				Dtype string `yaml:"dtype"`
				List  []struct {
					Name  string `yaml:"name"`
					Dtype string `yaml:"dtype"`
				} `yaml:"list"`
			} `yaml:"features"`
			Splits []struct {
				Name        string `yaml:"name"`
				NumExamples int    `yaml:"num_examples"`
			} `yaml:"splits"`
		} `yaml:"dataset_info"`
		Tags []string `yaml:"tags"`
	}
	if err := yaml.UnmarshalStrict([]byte(parts[1]), &header); err != nil {
		t.Fatalf("the card's YAML header: %v\n%s", err, parts[1])
	}
	if len(header.Configs) != 1 || len(header.Configs[0].DataFiles) != 1 ||
		strings.Join(header.Configs[0].DataFiles[0].Path, " ") != strings.Join(sum.Shards, " ") ||
		header.Configs[0].DataFiles[0].Split != "train" {
		t.Errorf("the card's configs do not name the shards %v: %+v", sum.Shards, header.Configs)
	}
	if f := header.DatasetInfo.Features; len(f) != 3 || f[1].Name != "conversations" || len(f[1].List) != 3 {
		t.Errorf("features %+v", f)
	}
	if s := header.DatasetInfo.Splits; len(s) != 1 || s[0].NumExamples != 6 {
		t.Errorf("splits %+v", s)
	}
	if !strings.Contains(parts[2], "rows written") {
		t.Errorf("the card has no export summary:\n%s", parts[2])
	}
}

// A Parquet target that is a file, or a directory holding anything, is
// refused before anything is read, and nothing is left behind.
func TestParquetTarget(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{file, full} {
		_, err := export.WriteParquet(context.Background(), export.Files("testdata/turns"), target, export.Options{Run: "turns"})
		if err == nil || !strings.Contains(err.Error(), "--out "+target) {
			t.Errorf("%s: %v", target, err)
		}
	}
	// A run that cannot be read leaves no directory.
	bad := filepath.Join(dir, "new")
	if _, err := export.WriteParquet(context.Background(), export.Files(filepath.Join(dir, "nope")), bad, export.Options{Run: "x"}); err == nil {
		t.Error("a missing run exported")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("left behind: %v", entries)
	}
}
