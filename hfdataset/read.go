package hfdataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// IsDataset reports whether dir is a saved dataset: a directory with
// state.json.
func IsDataset(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, StateFile))
	return err == nil
}

// Reader reads a saved dataset's rows in order, one record batch in
// memory at a time. Its zero value is not usable: use Open.
type Reader struct {
	dir   string
	files []string
	file  int
	f     *os.File
	r     *ipc.Reader
	rec   arrow.RecordBatch
	ids   *array.List
	mask  *array.List
	row   int // within rec
	n     int // rows read
}

// Open opens the dataset saved in dir.
func Open(dir string) (*Reader, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, fmt.Errorf("%s is not a saved dataset (datasets' save_to_disk writes %s): %w", dir, StateFile, err)
	}
	var st struct {
		DataFiles []struct {
			Filename string `json:"filename"`
		} `json:"_data_files"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, StateFile), err)
	}
	if len(st.DataFiles) == 0 {
		return nil, fmt.Errorf("%s names no data files", filepath.Join(dir, StateFile))
	}
	r := &Reader{dir: dir}
	for _, f := range st.DataFiles {
		if f.Filename == "" || filepath.Base(f.Filename) != f.Filename {
			return nil, fmt.Errorf("%s names a data file %q outside the directory", filepath.Join(dir, StateFile), f.Filename)
		}
		r.files = append(r.files, filepath.Join(dir, f.Filename))
	}
	return r, nil
}

// Rows is how many rows have been read.
func (r *Reader) Rows() int { return r.n }

// Next returns the next row, or io.EOF after the last. A dataset without
// input_ids and loss_mask list columns of integers is an error naming
// what it has.
func (r *Reader) Next() (Row, error) {
	for r.rec == nil || r.row >= int(r.rec.NumRows()) {
		if err := r.nextBatch(); err != nil {
			return Row{}, err
		}
	}
	i := r.row
	r.row++
	r.n++
	ids, err := ints(r.ids, i)
	if err != nil {
		return Row{}, fmt.Errorf("row %d: input_ids: %w", r.n-1, err)
	}
	m, err := ints(r.mask, i)
	if err != nil {
		return Row{}, fmt.Errorf("row %d: loss_mask: %w", r.n-1, err)
	}
	mask := make([]int, len(m))
	for k, v := range m {
		mask[k] = int(v)
	}
	return Row{InputIDs: ids, LossMask: mask}, nil
}

// nextBatch moves to the next record batch, opening the next file when
// one is read through.
func (r *Reader) nextBatch() error {
	if r.rec != nil {
		r.rec.Release()
		r.rec = nil
	}
	for {
		if r.r == nil {
			if r.file >= len(r.files) {
				return io.EOF
			}
			f, err := os.Open(r.files[r.file])
			if err != nil {
				return err
			}
			rd, err := ipc.NewReader(f)
			if err != nil {
				f.Close()
				return fmt.Errorf("%s is not an Arrow stream: %w", r.files[r.file], err)
			}
			r.f, r.r = f, rd
			r.file++
		}
		if r.r.Next() {
			rec := r.r.RecordBatch()
			rec.Retain()
			ids, mask, err := listColumns(rec, r.files[r.file-1])
			if err != nil {
				rec.Release()
				return err
			}
			r.rec, r.ids, r.mask, r.row = rec, ids, mask, 0
			return nil
		}
		err := r.r.Err()
		r.r.Release()
		r.f.Close()
		r.r, r.f = nil, nil
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: %w", r.files[r.file-1], err)
		}
	}
}

// listColumns finds the input_ids and loss_mask columns of rec.
func listColumns(rec arrow.RecordBatch, file string) (ids, mask *array.List, err error) {
	find := func(name string) (*array.List, error) {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) == 0 {
			var have []string
			for _, f := range rec.Schema().Fields() {
				have = append(have, f.Name)
			}
			return nil, fmt.Errorf("%s has no %s column (it has %v): extraction reads speculators' preprocessed datasets, with input_ids and loss_mask", file, name, have)
		}
		l, ok := rec.Column(idx[0]).(*array.List)
		if !ok {
			return nil, fmt.Errorf("%s: column %s is %s, not a list of integers", file, name, rec.Column(idx[0]).DataType())
		}
		return l, nil
	}
	if ids, err = find("input_ids"); err != nil {
		return nil, nil, err
	}
	if mask, err = find("loss_mask"); err != nil {
		return nil, nil, err
	}
	return ids, mask, nil
}

// ints is list l's row i as int64s, whatever its integer type.
func ints(l *array.List, i int) ([]int64, error) {
	if l.IsNull(i) {
		return nil, errors.New("null")
	}
	start, end := l.ValueOffsets(i)
	out := make([]int64, 0, end-start)
	switch v := l.ListValues().(type) {
	case *array.Int64:
		out = append(out, v.Int64Values()[start:end]...)
	case *array.Int32:
		for _, x := range v.Int32Values()[start:end] {
			out = append(out, int64(x))
		}
	case *array.Int16:
		for _, x := range v.Int16Values()[start:end] {
			out = append(out, int64(x))
		}
	case *array.Int8:
		for _, x := range v.Int8Values()[start:end] {
			out = append(out, int64(x))
		}
	case *array.Uint32:
		for _, x := range v.Uint32Values()[start:end] {
			out = append(out, int64(x))
		}
	case *array.Uint8:
		for _, x := range v.Uint8Values()[start:end] {
			out = append(out, int64(x))
		}
	case *array.Boolean:
		for k := start; k < end; k++ {
			if v.Value(int(k)) {
				out = append(out, 1)
			} else {
				out = append(out, 0)
			}
		}
	default:
		return nil, fmt.Errorf("values of type %s, not integers", v.DataType())
	}
	return out, nil
}

// Close closes the file being read.
func (r *Reader) Close() error {
	if r.rec != nil {
		r.rec.Release()
		r.rec = nil
	}
	if r.r != nil {
		r.r.Release()
		r.r = nil
	}
	if r.f != nil {
		err := r.f.Close()
		r.f = nil
		return err
	}
	return nil
}
