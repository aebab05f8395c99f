package producer

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressInterval is how often a plain (non-terminal) progress line is
// written: often enough to see a run move in a log, rarely enough that a
// million-prompt produce writes a few hundred lines, not a million.
const progressInterval = 5 * time.Second

// meterKind selects what a meter counts and how a plain line reads.
type meterKind int

const (
	// bytesLine counts bytes of the input file (validation pass).
	bytesLine meterKind = iota
	// promptsLine counts prompts queued, new and already there.
	promptsLine
)

// meter reports the progress of one pass. A nil meter reports nothing.
type meter struct {
	w    io.Writer
	desc string
	kind meterKind
	// noun names what a promptsLine meter counts: "prompts", or
	// "samples" when each prompt is queued several times.
	noun  string
	total int64
	start time.Time
	bar   *progressbar.ProgressBar

	done    atomic.Int64 // bytes read, or prompts queued (new + already)
	already atomic.Int64 // prompts found already queued

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// newMeter starts reporting to w: a progress bar when w is a terminal, a
// plain line every progressInterval otherwise. noun names what a
// promptsLine meter counts. It returns nil when w is nil.
func newMeter(w io.Writer, desc string, total int64, kind meterKind, noun string) *meter {
	if w == nil {
		return nil
	}
	m := &meter{w: w, desc: desc, kind: kind, noun: noun, total: total, start: time.Now(), stop: make(chan struct{})}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(desc),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100 * time.Millisecond),
			progressbar.OptionSetWidth(30),
		}
		if kind == bytesLine {
			opts = append(opts, progressbar.OptionShowBytes(true))
		} else {
			opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString(noun))
		}
		m.bar = progressbar.NewOptions64(total, opts...)
		return m
	}
	m.wg.Add(1)
	go m.tick()
	return m
}

// set records an absolute count (bytes read).
func (m *meter) set(n int64) {
	if m == nil {
		return
	}
	m.done.Store(n)
	if m.bar != nil {
		_ = m.bar.Set64(n)
	}
}

// queued records a prompt message of units samples queued; already
// says it had been queued by an earlier produce.
func (m *meter) queued(already bool, units int) {
	if m == nil {
		return
	}
	m.done.Add(int64(units))
	if already {
		m.already.Add(int64(units))
	}
	if m.bar != nil {
		_ = m.bar.Add64(int64(units))
	}
}

// finish stops reporting and writes the final state.
func (m *meter) finish() {
	if m == nil {
		return
	}
	m.once.Do(func() {
		if m.bar != nil {
			_ = m.bar.Exit()
			// The bar leaves its line open; the summary goes below it.
			fmt.Fprintf(m.w, "\n%s\n", m.line())
			return
		}
		close(m.stop)
		m.wg.Wait()
		fmt.Fprintln(m.w, m.line())
	})
}

func (m *meter) tick() {
	defer m.wg.Done()
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			fmt.Fprintln(m.w, m.line())
		case <-m.stop:
			return
		}
	}
}

// line is the plain progress line.
func (m *meter) line() string {
	done := m.done.Load()
	secs := time.Since(m.start).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(done) / secs
	}
	pct := 100.0
	if m.total > 0 {
		pct = 100 * float64(done) / float64(m.total)
	}
	if m.kind == bytesLine {
		return fmt.Sprintf("%s: %s of %s (%.0f%%), %s/s", m.desc, formatBytes(done), formatBytes(m.total), pct, formatBytes(int64(rate)))
	}
	already := m.already.Load()
	return fmt.Sprintf("%s: %d/%d %s queued (%.0f%%; %d new, %d already queued), %s %s/s",
		m.desc, done, m.total, m.noun, pct, done-already, already, strconv.FormatFloat(rate, 'f', 0, 64), m.noun)
}
