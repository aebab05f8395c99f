package producer

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/aerie-dev/aerie/batchstore"
	"github.com/aerie-dev/aerie/dataset"
	"github.com/aerie-dev/aerie/schema"
)

// Orders of the queue (Config.Order).
const (
	OrderInput        = "input"
	OrderLongestFirst = "longest-first"
)

// order decides the queue's order from Config.Order and how many of the
// valid prompts have a length hint.
func (c Config) order(hinted, valid int) string {
	if c.Order != "" {
		return c.Order
	}
	if valid > 0 && 2*hinted >= valid {
		return OrderLongestFirst
	}
	return OrderInput
}

// spooled is one prompt message kept aside while the file is read, to be
// published once the order is known.
type spooled struct {
	off  int64
	size int32
	hint int32
	line int32
}

// publishLongestFirst is the publishing pass in longest-first order. The
// file is read in its own order, as for the file's order, with the same
// checks against what was validated; each message goes to a spool file
// in the temporary directory rather than to the server. The spool is then
// published by descending length hint, the prompts without one after
// them in the file's order, and the samples of a prompt together. Memory
// holds 20 bytes per message; the spool takes about the size of the
// prompts on disk until the produce ends.
func publishLongestFirst(ctx context.Context, cfg Config, sc *scan, rd *dataset.Reader, pub *publisher) error {
	f, err := os.CreateTemp("", "aerie-produce-*.spool")
	if err != nil {
		return fmt.Errorf("produce run %s: make a spool file to order the prompts: %w; set TMPDIR to a directory with room for the prompts, or produce with --order input", cfg.Run, err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	recs := make([]spooled, 0, sc.report.Units)
	var off int64
	err = feed(ctx, cfg, sc, rd, func(_ context.Context, e *entry) error {
		data := e.msg.Data // the encoded prompt
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("write the spool file %s: %w; set TMPDIR to a directory with room for the prompts, or produce with --order input", f.Name(), err)
		}
		recs = append(recs, spooled{off: off, size: int32(len(data)), hint: int32(min(e.hint, dataset.MaxLengthHint)), line: int32(e.line)})
		off += int64(len(data))
		return nil
	})
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return err
	}
	// Stable: equal hints, and the samples of one prompt, keep the file's
	// order.
	slices.SortStableFunc(recs, func(a, b spooled) int {
		switch {
		case a.hint > 0 && b.hint > 0:
			return cmp.Compare(b.hint, a.hint)
		case a.hint > 0:
			return -1
		case b.hint > 0:
			return 1
		}
		return 0
	})
	pub.start(ctx)
	defer pub.finish(ctx)
	ch := newChunker(pub, cfg.MaxPending)
	buf := make([]byte, 0, 64<<10)
	for _, r := range recs {
		buf = slices.Grow(buf[:0], int(r.size))[:r.size]
		if _, err := f.ReadAt(buf, r.off); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("produce run %s: read the spool file %s: %w", cfg.Run, f.Name(), err)
		}
		p, err := schema.DecodePrompt(buf)
		if err != nil {
			return fmt.Errorf("produce run %s: the spool file %s is corrupt: %w", cfg.Run, f.Name(), err)
		}
		msg, err := promptMessage(p, sc.needs)
		if err != nil {
			return fmt.Errorf("produce %s %s %d: %w", cfg.PromptsFile, sc.unit, r.line, err)
		}
		if err := ch.add(ctx, &entry{line: int(r.line), id: p.ID, sample: p.Sample, units: p.SampleCount(), msg: msg, hint: p.LengthHint}); err != nil {
			return fmt.Errorf("produce run %s: stopped at %s %d of %s: %w; the prompts queued so far stay queued, produce again to publish the rest",
				cfg.Run, sc.unit, r.line, cfg.PromptsFile, err)
		}
	}
	return ch.flush(ctx, cfg, sc.unit)
}

// chunker hands prompts to the publisher in chunks (publisher.addAll),
// so that they are stored in the order they come.
type chunker struct {
	pub *publisher
	es  []*entry
}

func newChunker(pub *publisher, maxPending int) *chunker {
	return &chunker{pub: pub, es: make([]*entry, 0, orderChunk(maxPending))}
}

// add queues e, and publishes the chunk once it is full.
func (c *chunker) add(ctx context.Context, e *entry) error {
	c.es = append(c.es, e)
	if len(c.es) < cap(c.es) {
		return nil
	}
	err := c.pub.addAll(ctx, c.es)
	c.es = c.es[:0]
	return err
}

// flush publishes what is queued.
func (c *chunker) flush(ctx context.Context, cfg Config, unit string) error {
	if len(c.es) == 0 {
		return nil
	}
	last := c.es[len(c.es)-1].line
	err := c.pub.addAll(ctx, c.es)
	c.es = c.es[:0]
	if err != nil {
		return fmt.Errorf("produce run %s: stopped at %s %d of %s: %w; the prompts queued so far stay queued, produce again to publish the rest",
			cfg.Run, unit, last, cfg.PromptsFile, err)
	}
	return nil
}

// orderChunk is how many prompts of a longest-first queue are handed to
// the publisher together: a group commit's batch at most, and half the
// publishing slots, so that a chunk never waits on slots its own
// prompts hold.
func orderChunk(maxPending int) int {
	return max(1, min(batchstore.MaxMsgs, maxPending/2))
}
