package producer

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

func TestTokenOfMatchesSubjectToken(t *testing.T) {
	for _, id := range []string{"a", "p-1", "ü.*>", strings.Repeat("z", 256)} {
		tok := tokenOf(id)
		if got := schema.SubjectToken(id); got != hex.EncodeToString(tok[:]) {
			t.Errorf("tokenOf(%q) = %x, schema.SubjectToken = %s", id, tok, got)
		}
	}
}

// A Parquet file's invalid rows are listed as FILE:ROW, duplicates by
// row, as a JSONL file's lines are.
func TestValidateParquetRows(t *testing.T) {
	e := setup(t)
	cfg := e.config("../dataset/testdata/bad.parquet")
	rep, err := Validate(ctxFor(t), cfg)
	if err == nil || !strings.Contains(err.Error(), "bad.parquet has 3 invalid rows") || !strings.Contains(err.Error(), "fix these rows") {
		t.Fatalf("error %v", err)
	}
	var got []string
	for _, p := range rep.Problems {
		got = append(got, p.String())
	}
	want := []string{
		"../dataset/testdata/bad.parquet:2: no messages, conversations or prompt field",
		"../dataset/testdata/bad.parquet:3: messages is empty",
		`../dataset/testdata/bad.parquet:4: duplicate id "b-1" (first on row 1)`,
	}
	if rep.Lines != 5 || rep.Valid != 2 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines %d valid %d, problems:\n%s\nwant:\n%s", rep.Lines, rep.Valid, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
