// Command parquetread reads the Parquet shards of an aerie export with
// Apache Arrow's Go implementation, a different library from the one
// aerie writes Parquet with, and prints what it found as JSON: each
// shard's Arrow schema and row count, and the first row's id. Package
// export's tests run it on the exports they write.
//
//	go run . DIR/data/train-00000-of-00001.parquet ...
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

type shard struct {
	Path    string `json:"path"`
	Schema  string `json:"schema"`
	Rows    int64  `json:"rows"`
	FirstID string `json:"first_id,omitempty"`
}

func main() {
	var out []shard
	for _, path := range os.Args[1:] {
		s, err := read(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "parquetread: %s: %v\n", path, err)
			os.Exit(1)
		}
		out = append(out, s)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}

func read(path string) (shard, error) {
	r, err := file.OpenParquetFile(path, false)
	if err != nil {
		return shard{}, err
	}
	defer r.Close()
	fr, err := pqarrow.NewFileReader(r, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return shard{}, err
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		return shard{}, err
	}
	defer tbl.Release()
	s := shard{Path: path, Schema: tbl.Schema().String(), Rows: tbl.NumRows()}
	if tbl.NumRows() > 0 {
		col := tbl.Column(0).Data().Chunk(0)
		if ids, ok := col.(*array.String); ok {
			s.FirstID = ids.Value(0)
		}
	}
	return s, nil
}
