package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/aerie-dev/aerie/dataset"
)

// parquetMessage and parquetRow are the columns of FormatParquet: the
// specforge row, conversations a list of structs. reasoning_content is
// null on turns the target did not generate or that have no reasoning.
type parquetMessage struct {
	Role             string  `parquet:"role"`
	Content          string  `parquet:"content"`
	ReasoningContent *string `parquet:"reasoning_content,optional"`
}

type parquetRow struct {
	ID            string           `parquet:"id"`
	Conversations []parquetMessage `parquet:"conversations,list"`
	Status        string           `parquet:"status"`
}

// The layout of a FormatParquet directory, as the Hugging Face hub
// expects it: the shards of the train split under data/, and the card.
const (
	parquetDataDir = "data"
	parquetCard    = "README.md"
)

// shardName is the name of shard k of n (from 0): train-0000K-of-0000N.
func shardName(k, n int) string {
	return fmt.Sprintf("train-%05d-of-%05d.parquet", k, n)
}

// parquetFlushBytes bounds the rows held in memory before they are
// written out as a row group: memory stays flat in the size of the run.
const parquetFlushBytes = 16 << 20

// CheckParquetTarget checks that dir can take a FormatParquet export: it
// does not exist, or is an empty directory. An export never writes over
// a dataset.
func CheckParquetTarget(dir string) error {
	info, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("--out %s is a file: format parquet writes a directory (data/ and README.md); name a new or empty directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("--out %s is not empty: format parquet writes a whole dataset and never writes over one; remove it or name a new directory", dir)
	}
	return nil
}

// WriteParquet writes the run's rows as a Hugging Face dataset in dir:
// Parquet shards of at most opts.ShardSize bytes under data/, written as
// the rows stream, and README.md, the dataset card. Everything is written
// in a directory beside dir and renamed to it when complete: an export
// that fails leaves nothing behind.
func WriteParquet(ctx context.Context, src Source, dir string, opts Options) (Summary, error) {
	opts.Format = FormatParquet
	if err := opts.Validate(); err != nil {
		return Summary{}, err
	}
	if err := CheckParquetTarget(dir); err != nil {
		return Summary{}, err
	}
	if opts.ShardSize == 0 {
		opts.ShardSize = DefaultShardSize
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return Summary{}, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".*.tmp")
	if err != nil {
		return Summary{}, fmt.Errorf("create a directory in %s: %w", parent, err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Mkdir(filepath.Join(tmp, parquetDataDir), 0o700); err != nil {
		return Summary{}, err
	}
	e := newWriter(opts)
	sink := &parquetSink{dir: filepath.Join(tmp, parquetDataDir), shardSize: opts.ShardSize}
	e.sink = sink
	sum, err := e.run(ctx, src)
	if err != nil {
		return sum, err
	}
	if sum.Shards, err = sink.rename(); err != nil {
		return sum, err
	}
	if err := dataset.WriteFileAtomic(filepath.Join(tmp, parquetCard), func(w io.Writer) error {
		return writeCard(w, sum, opts)
	}); err != nil {
		return sum, err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return sum, fmt.Errorf("replace the empty directory %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return sum, fmt.Errorf("write %s: %w", dir, err)
	}
	done = true
	return sum, nil
}

// parquetSink writes rows to shard after shard in dir, each at most
// shardSize bytes: a shard is closed when what it holds and the rows
// waiting to be written, counted uncompressed, would pass the bound, so
// a shard is never larger unless one row alone is.
type parquetSink struct {
	dir       string
	shardSize int64
	shards    []string // temporary names, in order
	f         *os.File
	cw        *countingWriter
	w         *parquet.GenericWriter[parquetRow]
	rows      []parquetRow
	pending   int64 // bytes of rows not yet in the file
	inShard   int   // rows in the open shard
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (p *parquetSink) row(r *exportRow, tk int) error {
	row := parquetRow{ID: ID(r.unit), Status: "success", Conversations: make([]parquetMessage, len(r.turns))}
	size := int64(len(row.ID) + 16)
	for i := range r.turns {
		t := &r.turns[i]
		m := parquetMessage{Role: t.role, Content: r.text(t.content)}
		size += int64(len(m.Role) + len(m.Content) + 16)
		if t.generated && !t.reasoningEmpty {
			s := r.text(t.reasoning)
			m.ReasoningContent = &s
			size += int64(len(s))
		}
		row.Conversations[i] = m
	}
	if p.w != nil && p.inShard > 0 && p.cw.n+p.pending+size > p.shardSize {
		if err := p.closeShard(); err != nil {
			return err
		}
	}
	if p.w == nil {
		if err := p.openShard(); err != nil {
			return err
		}
	}
	p.rows = append(p.rows, row)
	p.pending += size
	p.inShard++
	if len(p.rows) >= 256 {
		if err := p.writeRows(); err != nil {
			return err
		}
	}
	if p.pending >= parquetFlushBytes {
		return p.flush()
	}
	return nil
}

func (p *parquetSink) openShard() error {
	name := filepath.Join(p.dir, fmt.Sprintf(".shard-%05d", len(p.shards)))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	p.f, p.cw = f, &countingWriter{w: f}
	p.w = parquet.NewGenericWriter[parquetRow](p.cw, parquet.Compression(&parquet.Snappy),
		parquet.CreatedBy("aerie", "", ""))
	p.shards = append(p.shards, name)
	p.inShard = 0
	return nil
}

func (p *parquetSink) writeRows() error {
	if len(p.rows) == 0 {
		return nil
	}
	if _, err := p.w.Write(p.rows); err != nil {
		return err
	}
	clear(p.rows)
	p.rows = p.rows[:0]
	return nil
}

// flush writes the rows held as a row group.
func (p *parquetSink) flush() error {
	if err := p.writeRows(); err != nil {
		return err
	}
	if err := p.w.Flush(); err != nil {
		return err
	}
	p.pending = 0
	return nil
}

func (p *parquetSink) closeShard() error {
	if err := p.writeRows(); err != nil {
		return err
	}
	if err := p.w.Close(); err != nil {
		return err
	}
	if err := p.f.Sync(); err != nil {
		return err
	}
	err := p.f.Close()
	p.w, p.f, p.pending = nil, nil, 0
	return err
}

func (p *parquetSink) failed(*dataset.FailedLine) error { return nil }

// close ends the last shard; an export of no rows still has one shard,
// empty, so that the dataset loads as an empty split.
func (p *parquetSink) close() error {
	if p.w == nil && len(p.shards) == 0 {
		if err := p.openShard(); err != nil {
			return err
		}
	}
	if p.w == nil {
		return nil
	}
	return p.closeShard()
}

// rename gives the shards their final names, now that their number is
// known, and returns them relative to the dataset's directory.
func (p *parquetSink) rename() ([]string, error) {
	var names []string
	for k, tmp := range p.shards {
		name := shardName(k, len(p.shards))
		if err := os.Rename(tmp, filepath.Join(p.dir, name)); err != nil {
			return nil, err
		}
		names = append(names, parquetDataDir+"/"+name)
	}
	return names, nil
}
