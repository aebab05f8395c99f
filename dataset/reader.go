package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/aerie-dev/aerie/hfdataset"
)

// Form is the form of a prompts file.
type Form int

const (
	// JSONL is one JSON object per line; its records are lines.
	JSONL Form = iota
	// Parquet is an Apache Parquet file; its records are rows.
	Parquet
	// SavedDataset is a directory saved by datasets' save_to_disk
	// (speculators' preprocessed data), read for extraction only; its
	// records are rows.
	SavedDataset
)

// Unit names a record of the form: "line" or "row".
func (f Form) Unit() string {
	if f == Parquet || f == SavedDataset {
		return "row"
	}
	return "line"
}

func (f Form) String() string {
	switch f {
	case Parquet:
		return "Parquet"
	case SavedDataset:
		return "saved dataset"
	}
	return "JSONL"
}

// Record is one record of a prompts file: a non-blank JSONL line or a
// Parquet row.
type Record struct {
	// N is the record's 1-based line (JSONL) or row (Parquet) number.
	N int
	// Line is the prompt the record holds, when Err is nil.
	Line Line
	// Err says why the record is not a prompt; nil when it is one.
	Err error
}

// Reader reads the prompts of a file one record at a time, whatever the
// file's form, holding one record in memory (one row group's pages for
// Parquet). Its zero value is not usable: use Open or NewReader.
type Reader struct {
	form  Form
	opts  ParseOptions
	info  os.FileInfo
	close func() error
	// next reads the following record; blank is set for a blank line,
	// which is counted but is no record.
	next func() (rec Record, blank bool, err error)
	// offset reports how far into the file reading is, in bytes.
	offset func() int64
	count  int
}

// Open opens path and reads it as the prompts file it is: Parquet when it
// starts and ends with Parquet's magic bytes (whatever its name), JSONL
// otherwise. Each record is read as opts say. Close the Reader when done.
func Open(path string, opts ParseOptions) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := NewReader(f, opts)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	closeRows := r.close
	r.close = func() error {
		closeRows()
		return f.Close()
	}
	return r, nil
}

// NewReader reads the open file f as Open does; closing the Reader does
// not close f. Its records start where the file starts, whatever f's
// offset.
func NewReader(f *os.File, opts ParseOptions) (*Reader, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		if opts.extraction() && hfdataset.IsDataset(f.Name()) {
			return openSaved(f.Name(), info, opts)
		}
		if opts.extraction() {
			return nil, errors.New("is a directory without state.json: name a JSONL file of input_ids and loss_mask rows, or a directory datasets' save_to_disk wrote")
		}
		return nil, errors.New("is a directory: name a JSONL or Parquet file")
	}
	r := &Reader{opts: opts, info: info, close: func() error { return nil }}
	if isParquet(f, info.Size()) {
		if opts.extraction() {
			return nil, errors.New("is a Parquet file: extraction samples are read from JSONL rows of input_ids and loss_mask (aerie export --format speculators), or a speculators preprocessed dataset directory")
		}
		r.form = Parquet
		if err := r.openParquet(f, info.Size()); err != nil {
			return nil, err
		}
		return r, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	lr := NewLineReader(f, MaxLineBytes)
	r.offset = lr.Offset
	idx := 0
	r.next = func() (Record, bool, error) {
		data, _, tooLong, err := lr.Next()
		if err != nil {
			return Record{}, false, err
		}
		rec := Record{N: lr.Line()}
		switch {
		case tooLong:
			idx++
			rec.Err = fmt.Errorf("line is longer than %d MiB: no server accepts a prompt that large; shorten or remove it", MaxLineBytes>>20)
		case len(bytes.TrimSpace(data)) == 0:
			return rec, true, nil
		case opts.extraction():
			rec.Line, rec.Err = parseExtraction(data, idx)
			idx++
		default:
			rec.Line, rec.Err = ParseLineWith(data, opts)
		}
		return rec, false, nil
	}
	return r, nil
}

// Next returns the next record. Blank lines are skipped (Count counts
// them). After the last record the error is io.EOF; any other error means
// the file could not be read on, and says after which record.
func (r *Reader) Next() (Record, error) {
	for {
		rec, blank, err := r.next()
		if errors.Is(err, io.EOF) {
			return Record{}, io.EOF
		}
		if err != nil {
			return Record{}, fmt.Errorf("read after %s %d: %w", r.form.Unit(), r.count, err)
		}
		r.count = rec.N
		if !blank {
			return rec, nil
		}
	}
}

// Form is the form the file was found to be.
func (r *Reader) Form() Form { return r.form }

// Unit names the file's records: "line" or "row".
func (r *Reader) Unit() string { return r.form.Unit() }

// Count is the number of lines (blank ones included) or rows read so far.
func (r *Reader) Count() int { return r.count }

// Offset is about how many bytes of the file have been read, for a
// progress display.
func (r *Reader) Offset() int64 { return r.offset() }

// Info describes the file as it was when the Reader was made.
func (r *Reader) Info() os.FileInfo { return r.info }

// Close closes the file Open opened.
func (r *Reader) Close() error { return r.close() }

// openSaved reads the extraction samples of the dataset saved in dir:
// row i is the sample of idx i.
func openSaved(dir string, info os.FileInfo, opts ParseOptions) (*Reader, error) {
	hr, err := hfdataset.Open(dir)
	if err != nil {
		return nil, err
	}
	r := &Reader{form: SavedDataset, opts: opts, info: info, close: hr.Close, offset: func() int64 { return 0 }}
	r.next = func() (Record, bool, error) {
		row, err := hr.Next()
		if err != nil {
			return Record{}, false, err
		}
		idx := hr.Rows() - 1
		rec := Record{N: idx + 1}
		rec.Line, rec.Err = ExtractionLine(idx, row.InputIDs, row.LossMask)
		if rec.Err != nil {
			rec.Err = fmt.Errorf("idx %d: %w", idx, rec.Err)
		}
		return rec, false, nil
	}
	return r, nil
}
