package hfdataset

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Row is one sample of a speculators dataset.
type Row struct {
	InputIDs []int64
	LossMask []int
}

// Files of a saved dataset.
const (
	StateFile = "state.json"
	InfoFile  = "dataset_info.json"
)

// maxShardBytes is datasets' default max_shard_size: a shard is closed
// once it holds this much.
const maxShardBytes = 500 << 20

// batchRows is how many rows go in one record batch
// (datasets' DEFAULT_MAX_BATCH_SIZE).
const batchRows = 1000

// features is the dataset's features as datasets writes them for
// speculators' columns: input_ids and loss_mask as List(Value("int64")),
// seq_len as Value("int64").
var features = json.RawMessage(`{"input_ids": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"}, "loss_mask": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"}, "seq_len": {"dtype": "int64", "_type": "Value"}}`)

// columns are the dataset's columns, in order.
var columns = []string{"input_ids", "loss_mask", "seq_len"}

// arrowSchema is the Arrow schema of the dataset's files, with the
// features in its "huggingface" metadata, as datasets' ArrowWriter
// writes it.
func arrowSchema() *arrow.Schema {
	meta, _ := json.Marshal(map[string]any{"info": map[string]any{"features": features}})
	return arrow.NewSchema([]arrow.Field{
		{Name: "input_ids", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "loss_mask", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "seq_len", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, func() *arrow.Metadata {
		m := arrow.NewMetadata([]string{"huggingface"}, []string{string(meta)})
		return &m
	}())
}

// Write saves the n rows that row gives, in order, as a dataset in dir,
// in the torch format speculators' preprocessing leaves its datasets in.
// The data files are written under temporary names and renamed, then
// state.json last: a dir whose state.json names its files holds them
// whole. Files of an earlier save that are no longer named are removed.
func Write(dir string, n int, row func(i int) (Row, error)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save dataset %s: %w", dir, err)
	}
	tag := make([]byte, 6)
	_, _ = rand.Read(tag)
	var tmp []string
	defer func() {
		for _, p := range tmp {
			os.Remove(p)
		}
	}()
	schema := arrowSchema()
	var (
		f      *os.File
		w      *ipc.Writer
		shard  int64
		rows   int
		closeF = func() error {
			if w == nil {
				return nil
			}
			err := w.Close()
			if serr := f.Sync(); err == nil {
				err = serr
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			w, f = nil, nil
			return err
		}
	)
	defer closeF()
	mem := memory.NewGoAllocator()
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	ids := b.Field(0).(*array.ListBuilder)
	mask := b.Field(1).(*array.ListBuilder)
	seq := b.Field(2).(*array.Int64Builder)
	flush := func() error {
		if rows == 0 {
			return nil
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		if w == nil {
			name := filepath.Join(dir, fmt.Sprintf(".data-%05d.%s.arrow.partial", len(tmp), hex.EncodeToString(tag)))
			var err error
			if f, err = os.Create(name); err != nil {
				return err
			}
			tmp = append(tmp, name)
			w = ipc.NewWriter(f, ipc.WithSchema(schema), ipc.WithAllocator(mem))
			shard = 0
		}
		if err := w.Write(rec); err != nil {
			return err
		}
		rows = 0
		if info, err := f.Stat(); err == nil {
			shard = info.Size()
		}
		if shard >= maxShardBytes {
			return closeF()
		}
		return nil
	}
	for i := range n {
		r, err := row(i)
		if err != nil {
			return fmt.Errorf("save dataset %s: row %d: %w", dir, i, err)
		}
		if len(r.LossMask) != len(r.InputIDs) {
			return fmt.Errorf("save dataset %s: row %d has %d loss_mask values for %d input_ids", dir, i, len(r.LossMask), len(r.InputIDs))
		}
		ids.Append(true)
		ids.ValueBuilder().(*array.Int64Builder).AppendValues(r.InputIDs, nil)
		mask.Append(true)
		mb := mask.ValueBuilder().(*array.Int64Builder)
		for _, m := range r.LossMask {
			mb.Append(int64(m))
		}
		seq.Append(int64(len(r.InputIDs)))
		rows++
		if rows == batchRows {
			if err := flush(); err != nil {
				return fmt.Errorf("save dataset %s: %w", dir, err)
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("save dataset %s: %w", dir, err)
	}
	if len(tmp) == 0 || n == 0 {
		// An empty dataset is one shard holding the schema alone.
		name := filepath.Join(dir, fmt.Sprintf(".data-%05d.%s.arrow.partial", len(tmp), hex.EncodeToString(tag)))
		f2, err := os.Create(name)
		if err != nil {
			return fmt.Errorf("save dataset %s: %w", dir, err)
		}
		tmp = append(tmp, name)
		w2 := ipc.NewWriter(f2, ipc.WithSchema(schema), ipc.WithAllocator(mem))
		err = errors.Join(w2.Close(), f2.Sync(), f2.Close())
		if err != nil {
			return fmt.Errorf("save dataset %s: %w", dir, err)
		}
	}
	if err := closeF(); err != nil {
		return fmt.Errorf("save dataset %s: %w", dir, err)
	}
	names := make([]string, len(tmp))
	for i, p := range tmp {
		names[i] = fmt.Sprintf("data-%05d-of-%05d.arrow", i, len(tmp))
		if err := os.Rename(p, filepath.Join(dir, names[i])); err != nil {
			return fmt.Errorf("save dataset %s: %w", dir, err)
		}
	}
	tmp = nil
	if err := writeJSON(filepath.Join(dir, InfoFile), info()); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, StateFile), state(names, hex.EncodeToString(tag))); err != nil {
		return err
	}
	removeStale(dir, names)
	return nil
}

// info is dataset_info.json: DatasetInfo's fields datasets writes, with
// the features.
func info() any {
	return map[string]any{
		"builder_name": nil, "citation": "", "config_name": nil, "dataset_name": nil, "dataset_size": nil,
		"description": "", "download_checksums": nil, "download_size": nil, "features": features,
		"homepage": "", "license": "", "post_processed": nil, "post_processing_size": nil,
		"size_in_bytes": nil, "splits": nil, "supervised_keys": nil, "version": nil,
	}
}

// state is state.json for data files names: the torch format over every
// column, as speculators' preprocessing sets it (set_format(type="torch")).
func state(names []string, fingerprint string) any {
	files := make([]map[string]string, len(names))
	for i, n := range names {
		files[i] = map[string]string{"filename": n}
	}
	return map[string]any{
		"_data_files": files, "_fingerprint": fingerprint, "_format_columns": columns,
		"_format_kwargs": map[string]any{}, "_format_type": "torch", "_output_all_columns": false, "_split": nil,
	}
}

// writeJSON writes v, indented, to path through a temporary file.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".partial"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("save dataset: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save dataset: %w", err)
	}
	return nil
}

// removeStale removes the data files of an earlier save that keep not
// among names.
func removeStale(dir string, names []string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	for _, e := range entries {
		n := e.Name()
		if !keep[n] && filepath.Ext(n) == ".arrow" && len(n) > 5 && n[:5] == "data-" {
			os.Remove(filepath.Join(dir, n))
		}
	}
}
