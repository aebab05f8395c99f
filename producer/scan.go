package producer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aerie-dev/aerie/schema"
)

// MaxLineBytes bounds one input line. Long-context prompts run to a few
// MiB; a line beyond 64 MiB is far past any server's max_payload, so it is
// reported instead of being read into memory.
const MaxLineBytes = 64 << 20

// Buffer sizes of the line reader. Most lines fit the read buffer and are
// parsed in place; a longer one is assembled in a buffer that is dropped
// afterwards when it grew past keepLineBuffer, so one huge line does not
// pin its memory for the rest of the file.
const (
	readBufferSize = 256 << 10
	keepLineBuffer = 4 << 20
)

// lineReader reads a file line by line without holding more than one line.
type lineReader struct {
	r     *bufio.Reader
	max   int
	buf   []byte
	line  int   // number of the line last returned
	bytes int64 // bytes consumed so far
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, readBufferSize), max: max}
}

// next returns the next line without its line ending. The data is valid
// until the following call. A line longer than the maximum is consumed and
// reported by tooLong, with no data. After the last line, err is io.EOF.
func (lr *lineReader) next() (data []byte, tooLong bool, err error) {
	if cap(lr.buf) > keepLineBuffer {
		lr.buf = nil
	}
	lr.buf = lr.buf[:0]
	seen := 0
	for {
		chunk, err := lr.r.ReadSlice('\n')
		seen += len(chunk)
		lr.bytes += int64(len(chunk))
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			// Two bytes of slack for a "\r\n" ending.
			if seen > lr.max+2 {
				tooLong = true
				lr.buf = lr.buf[:0]
			} else if !tooLong {
				lr.buf = append(lr.buf, chunk...)
			}
			continue
		case err == nil || (errors.Is(err, io.EOF) && seen > 0):
			lr.line++
			if tooLong {
				return nil, true, nil
			}
			data = chunk
			if len(lr.buf) > 0 {
				lr.buf = append(lr.buf, chunk...)
				data = lr.buf
			}
			data = bytes.TrimSuffix(data, []byte("\n"))
			data = bytes.TrimSuffix(data, []byte("\r"))
			if len(data) > lr.max {
				return nil, true, nil
			}
			return data, false, nil
		default:
			return nil, false, err
		}
	}
}

// seenID records where a prompt id was first found and what the prompt
// holds. With its 16-byte key an entry takes 48 bytes: a file of a million
// prompts takes about 110 MB of map (measured), of which the digest is
// about 30 MB.
type seenID struct {
	line int
	// digest is the prompt's promptDigest: the run's digest is made of
	// them, and a stored prompt is compared with the file's through it.
	digest [16]byte
	// derived: the id was computed from the content.
	derived bool
	// rejected: the line was valid but cannot be published (too large),
	// so the publishing pass skips it.
	rejected bool
}

// scan is the outcome of the validation pass.
type scan struct {
	report Report
	// ids maps the subject token of every valid id to where it was first
	// found; the publishing pass publishes a line only when it is that
	// first place.
	ids  map[[16]byte]seenID
	info os.FileInfo
	// turns sums the turns of the valid prompts: schema.TurnSlots of each
	// with --turns all, one each otherwise.
	turns int
}

// scanFile is the validation pass: it reads every line, checks it, counts
// and finds duplicate ids. When limit is positive it also rejects prompts
// whose message would exceed the server's max_payload of limit bytes. An
// error is returned only when the file cannot be read or ctx ends.
func scanFile(ctx context.Context, cfg Config, limit int64) (*scan, error) {
	f, err := os.Open(cfg.PromptsFile)
	if err != nil {
		return nil, fmt.Errorf("produce: open prompts file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("produce: %w", err)
	}
	if info.IsDir() {
		return nil, fmt.Errorf("produce: %s is a directory: name a JSONL file", cfg.PromptsFile)
	}
	sc := &scan{ids: make(map[[16]byte]seenID), info: info}
	source := filepath.Base(cfg.PromptsFile)
	meter := newMeter(cfg.Progress, "validating "+source, info.Size(), bytesLine, "")
	defer meter.finish()

	lr := newLineReader(f, MaxLineBytes)
	for {
		data, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sc, fmt.Errorf("produce: read %s after line %d: %w", cfg.PromptsFile, lr.line, err)
		}
		meter.set(lr.bytes)
		if lr.line%1024 == 0 && ctx.Err() != nil {
			return sc, fmt.Errorf("produce: validating %s stopped at line %d: %w", cfg.PromptsFile, lr.line, ctx.Err())
		}
		sc.report.Lines++
		if !tooLong && len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		reason := sc.check(cfg, source, lr.line, data, tooLong, limit)
		if reason == "" {
			sc.report.Valid++
			continue
		}
		sc.report.Invalid++
		sc.report.addProblem(Problem{File: cfg.PromptsFile, Line: lr.line, Reason: reason})
	}
	sc.report.PromptsDigest = sc.promptsDigest()
	sc.report.Samples = cfg.samples()
	sc.report.Units = sc.report.Valid * cfg.samples()
	sc.report.Turns = sc.turns * cfg.samples()
	return sc, nil
}

// promptsDigest is the digest of the prompts the publishing pass
// publishes: the valid ones. Sorting their digests takes 16 bytes per
// prompt for a moment (16 MB for a million prompts) and well under a
// second.
func (sc *scan) promptsDigest() string {
	digests := make([][16]byte, 0, sc.report.Valid)
	for _, e := range sc.ids {
		if !e.rejected {
			digests = append(digests, e.digest)
		}
	}
	return promptsDigest(digests)
}

// check validates one non-blank line and records its id; it returns why
// the line is not accepted, or "".
func (sc *scan) check(cfg Config, source string, line int, data []byte, tooLong bool, limit int64) string {
	if tooLong {
		return fmt.Sprintf("line is longer than %s: no server accepts a prompt that large; shorten or remove it", formatBytes(MaxLineBytes))
	}
	l, err := parseLine(data, cfg.turnsAll())
	if err != nil {
		return err.Error()
	}
	key := tokenOf(l.ID)
	if first, ok := sc.ids[key]; ok {
		if l.Derived && first.derived {
			return fmt.Sprintf("same content as line %d", first.line)
		}
		return fmt.Sprintf("duplicate id %q (first on line %d)", truncate(l.ID, 60), first.line)
	}
	p := linePrompt(cfg.Run, fmt.Sprintf("%s:%d", source, line), l)
	entry := seenID{line: line, derived: l.Derived, digest: promptDigest(p)}
	var reason string
	if limit > 0 {
		// The last sample's message is the largest: its sample number
		// is the longest, and only samples after the first carry one.
		p.Sample = cfg.samples() - 1
		m, err := promptMessage(p)
		switch {
		case err != nil:
			reason = err.Error()
		case payloadSize(m) > limit:
			reason = oversizeReason(l.ID, payloadSize(m), limit)
		}
	}
	entry.rejected = reason != ""
	sc.ids[key] = entry
	if !entry.rejected {
		if cfg.turnsAll() {
			sc.turns += schema.TurnSlots(l.Messages)
		} else {
			sc.turns++
		}
	}
	return reason
}
