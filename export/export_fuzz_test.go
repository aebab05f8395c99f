package export_test

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/export"
)

// FuzzExportLine gives any bytes as a completions.jsonl line to every
// format's exporter: it never panics, and every row it writes is JSON.
func FuzzExportLine(f *testing.F) {
	for _, path := range []string{"testdata/run/completions.jsonl", "testdata/turns/completions.jsonl"} {
		file, err := os.Open(path)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			f.Add(append([]byte(nil), sc.Bytes()...))
		}
		file.Close()
	}
	f.Add([]byte(`{"id":1,"messages":null,"prompt_token_ids":[ 1 , 2 ],"token_ids":[3]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, format := range []string{export.FormatSpecForge, export.FormatShareGPT, export.FormatSpeculators, export.FormatOpenAIBatch} {
			var out strings.Builder
			e, err := export.NewWriter(&out, export.Options{Format: format, Run: "f", Drop: []string{}, AllowSimulated: true,
				Dedupe: export.DedupeAnswer, MaxLength: 100, System: systemFor(format)})
			if err != nil {
				t.Fatal(err)
			}
			_ = e.Completion(line) // a line it cannot read is an error, never a panic
			if _, err := e.Close(); err != nil && format != export.FormatSpeculators {
				t.Fatalf("%s: close: %v", format, err)
			}
			for _, row := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
				if row != "" && !json.Valid([]byte(row)) {
					t.Fatalf("%s wrote a row that is not JSON from %q:\n%s", format, line, row)
				}
			}
		}
	})
}

func systemFor(format string) string {
	if format == export.FormatShareGPT {
		return export.SystemMerge
	}
	return ""
}
