package dataset

import (
	"bytes"
	"errors"
	"io"
)

// parquetMagic starts and ends every Parquet file.
var parquetMagic = []byte("PAR1")

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

func (r *Reader) openParquet(f io.ReaderAt, size int64) error {
	return errors.New("reading Parquet input is not supported yet")
}
