package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// parquetMagic starts and ends every Parquet file.
var parquetMagic = []byte("PAR1")

// Columns of a Parquet prompts file: the fields of a JSONL line, with the
// same meaning. Any other column is ignored.
var parquetColumns = []string{"id", "messages", "conversations", "prompt", "params", "length_hint"}

// isParquet reports whether the file starts and ends with Parquet's
// magic bytes: the content decides, not the name.
func isParquet(r io.ReaderAt, size int64) bool {
	if size < 2*int64(len(parquetMagic)) {
		return false
	}
	head := make([]byte, len(parquetMagic))
	tail := make([]byte, len(parquetMagic))
	if _, err := r.ReadAt(head, 0); err != nil {
		return false
	}
	if _, err := r.ReadAt(tail, size-int64(len(tail))); err != nil {
		return false
	}
	return bytes.Equal(head, parquetMagic) && bytes.Equal(tail, parquetMagic)
}

// parquetRows reads the rows of a Parquet file one at a time, row group
// after row group: only the pages of the row being read are in memory.
type parquetRows struct {
	file   *parquet.File
	groups []parquet.RowGroup
	group  int
	rows   parquet.Rows
	buf    []parquet.Row
	n      int // rows read
	total  int64
}

// openParquet reads the file's footer and checks that it has a prompt
// column; its rows are read by r.next.
func (r *Reader) openParquet(f io.ReaderAt, size int64) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("not a readable Parquet file: %v", p)
		}
	}()
	pf, err := parquet.OpenFile(f, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return fmt.Errorf("not a readable Parquet file: %w", err)
	}
	var names []string
	found := false
	for _, field := range pf.Schema().Fields() {
		names = append(names, field.Name())
		switch field.Name() {
		case "messages", "conversations", "prompt":
			found = true
		}
	}
	if !found {
		sort.Strings(names)
		return fmt.Errorf("a Parquet prompts file needs a messages, conversations or prompt column, and this one has only %s: rename the column that holds the prompts", strings.Join(names, ", "))
	}
	pr := &parquetRows{file: pf, groups: pf.RowGroups(), buf: make([]parquet.Row, 1), total: pf.NumRows()}
	r.next = func() (Record, bool, error) {
		values, err := pr.next()
		if err != nil {
			return Record{}, false, err
		}
		rec := Record{N: pr.n}
		line, err := rowLine(values)
		if err != nil {
			rec.Err = err
			return rec, false, nil
		}
		rec.Line, rec.Err = ParseLineWith(line, r.opts)
		return rec, false, nil
	}
	r.offset = func() int64 {
		if pr.total <= 0 {
			return size
		}
		return size * int64(pr.n) / pr.total
	}
	r.close = pr.close
	return nil
}

// next returns the next row as column values by name; a row that cannot
// be decoded is given as an error value.
func (pr *parquetRows) next() (values map[string]any, err error) {
	for {
		if pr.rows == nil {
			if pr.group >= len(pr.groups) {
				return nil, io.EOF
			}
			pr.rows = pr.groups[pr.group].Rows()
			pr.group++
		}
		n, err := pr.readRow()
		if n == 1 {
			pr.n++
			return pr.decode()
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("row group %d: %w", pr.group, err)
		}
		pr.rows.Close()
		pr.rows = nil
	}
}

// readRow reads one row into pr.buf[0]; a malformed file is an error,
// not a panic.
func (pr *parquetRows) readRow() (n int, err error) {
	defer func() {
		if p := recover(); p != nil {
			n, err = 0, fmt.Errorf("malformed Parquet data: %v", p)
		}
	}()
	return pr.rows.ReadRows(pr.buf)
}

// decode turns the row just read into column values.
func (pr *parquetRows) decode() (values map[string]any, err error) {
	defer func() {
		if p := recover(); p != nil {
			values, err = map[string]any{rowError: fmt.Sprintf("the row cannot be decoded: %v", p)}, nil
		}
	}()
	values = map[string]any{}
	if err := pr.file.Schema().Reconstruct(&values, pr.buf[0]); err != nil {
		return map[string]any{rowError: fmt.Sprintf("the row cannot be decoded: %v", err)}, nil
	}
	return values, nil
}

func (pr *parquetRows) close() error {
	if pr.rows != nil {
		pr.rows.Close()
		pr.rows = nil
	}
	return nil
}

// rowError is the key under which decode reports a row it cannot read; it
// cannot be a column name read from a file (it holds a NUL).
const rowError = "\x00error"

// rowLine writes the row's columns as the JSONL line that holds the same
// fields, so that a row is read by exactly the rules of a line. A list
// column becomes a JSON array, a struct an object; a text column holding
// messages, conversations or params is taken as the JSON it holds.
func rowLine(values map[string]any) ([]byte, error) {
	if reason, ok := values[rowError].(string); ok {
		return nil, errors.New(reason)
	}
	obj := make(map[string]json.RawMessage, len(parquetColumns))
	for _, name := range parquetColumns {
		v, ok := values[name]
		if !ok || v == nil {
			continue
		}
		raw, err := columnJSON(name, v)
		if err != nil {
			return nil, err
		}
		obj[name] = raw
	}
	return json.Marshal(obj)
}

// columnJSON is one column's value as the JSON of a line's field.
func columnJSON(name string, v any) (json.RawMessage, error) {
	if b, ok := v.([]byte); ok {
		v = string(b)
	}
	switch x := v.(type) {
	case float32, float64:
		if name == "id" {
			return nil, fmt.Errorf("the id column holds floating-point numbers: store ids as strings or integers")
		}
	case string:
		switch name {
		case "messages", "conversations", "params":
			// JSON text, as datasets often store nested data.
			t := strings.TrimSpace(x)
			if !json.Valid([]byte(t)) {
				return nil, fmt.Errorf("the %s column holds text that is not JSON: store %s as a list of structs or as JSON text", name, name)
			}
			return json.RawMessage(t), nil
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("the %s column: %v", name, err)
	}
	return raw, nil
}
