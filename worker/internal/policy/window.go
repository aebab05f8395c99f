package policy

import (
	"math"
)

// Defaults of the window rule.
const (
	// DefaultMaxWindow bounds --window auto: far above any one server's
	// running batch (vLLM's max-num-seqs is 256 to 1,024), yet small
	// enough that a wrong reading cannot take thousands of prompts.
	DefaultMaxWindow = 1024
	// kvHighWater is the KV-cache use above which the window does not
	// grow: more sequences would soon be preempted.
	kvHighWater = 0.9
	// queueShare and minQueue make the queue a server may hold for us
	// (the allowance): 5% of its running batch, at least 4 requests, so
	// that a finishing sequence is replaced within the engine's next
	// step instead of after a round trip through NATS.
	queueShare = 0.05
	minQueue   = 4
	// fallbackAfter is how many readings may fail before the first good
	// one before an automatic window gives up and keeps the fixed
	// window: a server still loading its model answers /metrics already,
	// so failing this often means it serves none (or a proxy hides
	// them).
	fallbackAfter = 3
)

// WindowDecision is what the window's policies decide.
type WindowDecision struct {
	// Size is the new size, 0 to keep it; Why says why it changed.
	Size int
	Why  string
	// FallBack is set when the window gives up on the backend's load.
	FallBack *FallBack
	// Kept is the failed reading after which the window is kept.
	Kept error
}

// FallBack is why an automatic window gave up, and the reading's error.
type FallBack struct {
	Why string
	Err error
}

// Why a window falls back to a fixed one.
const (
	noLoadMetrics = "the backend serves no vLLM load metrics at /metrics"
	// NoMetricsReader is also the error of a snapshot whose backend has
	// no way to read its server's metrics.
	NoMetricsReader = "the backend cannot read its server's metrics"
)

// SizeWindow is the automatic window's policy: the size the rule gives
// for the backend's load, or, when the load cannot be read, the window
// kept (after a good reading: the breaker sees a server that is down) or
// the fixed window for good (before any, fallbackAfter times, or at once
// when the backend serves no load metrics). It returns the memory to
// keep.
func SizeWindow(c Config, s Snapshot, m Memory) (WindowDecision, Memory) {
	r := s.Load
	if !c.Auto || m.Load.Fixed || r.Load == nil && r.Err == nil {
		return WindowDecision{}, m
	}
	if r.Load == nil {
		if m.Load.Read {
			return WindowDecision{Kept: r.Err}, m
		}
		if m.Load.Failures++; m.Load.Failures < fallbackAfter && !r.NotServed {
			return WindowDecision{}, m
		}
		m.Load.Fixed = true
		fb := &FallBack{Why: noLoadMetrics, Err: r.Err}
		if r.NoReader {
			fb = &FallBack{Why: NoMetricsReader}
		}
		return WindowDecision{Size: c.Window, FallBack: fb}, m
	}
	m.Load.Read = true
	m.Rule.Max = c.MaxWindow
	next, why := m.Rule.Next(s.Size, s.Generating, *r.Load)
	if next == s.Size {
		return WindowDecision{}, m
	}
	return WindowDecision{Size: next, Why: why}, m
}

// capWindow bounds the window's decision by the yield cap: the size the
// sizer or the tail wants, or the window as it is (a fixed window that
// the cap held down: the fixed size), at most the cap. When the cap goes,
// a fixed window comes back to its size.
func capWindow(c Config, s Snapshot, d WindowDecision, y YieldDecision, wasCapped bool) WindowDecision {
	if y.Cap == 0 {
		if wasCapped && !c.Auto && d.Size == 0 && s.Size < c.Window {
			d.Size, d.Why = c.Window, "serving traffic clear"
		}
		return d
	}
	want := d.Size
	if want == 0 {
		want = s.Size
		if wasCapped && !c.Auto {
			want = c.Window
		}
	}
	if want > y.Cap {
		want, d.Why = y.Cap, "yielding to serving traffic"
		if y.Why != "" {
			d.Why += ": " + y.Why
		}
	}
	if want != s.Size {
		d.Size = want
	} else {
		d.Size = 0
	}
	return d
}

// WindowRule sizes a worker's window from its backend's load: every
// running slot busy, and only a small queue (the allowance) inside the
// server. It is a function of the readings it has been given, the
// window and what the worker has at the backend. The zero value bounds
// the window by DefaultMaxWindow.
type WindowRule struct {
	// Max bounds the window; zero means DefaultMaxWindow.
	Max int

	// Prev is the reading before, nil before the first.
	Prev *Load
	// Ceiling is the most requests seen running while others waited: the
	// server's batch as far as it is known (0 while unknown). Past it the
	// window grows by one a reading, not by half: a queue seen empty for
	// a moment, as a finished sequence is replaced, is no sign of room.
	Ceiling float64
}

// allowance is the queue kept inside a server running `running`.
func allowance(running float64) float64 {
	return max(minQueue, math.Ceil(queueShare*running))
}

// Next returns the window after reading now, given the window cur and
// the requests this worker has at the backend (ours), and says why it
// changed ("" when it did not):
//
//   - the engine preempted sequences since the last reading: shrink to
//     our share of those running, and by a tenth at least;
//   - more requests wait than the allowance, at this reading and the one
//     before, and the batch is full (as many run as ever ran with a
//     queue, or the KV cache is full): shrink toward our share of
//     running plus the allowance (never cutting a running request: the
//     window only stops new pulls);
//   - nothing waits, the KV cache is below its high-water mark and the
//     window is what limits us (our requests fill it, up to half the
//     allowance): grow by half, so a large server fills in a few
//     readings, up to the known batch plus the allowance, and by one
//     past it;
//   - otherwise (a queue within the allowance) keep it.
//
// Our share is ours over running plus waiting: with several workers on
// one server each gives up its part of the queue. The result is between
// 1 and Max.
func (r *WindowRule) Next(cur, ours int, now Load) (int, string) {
	prev := r.Prev
	r.Prev = &now
	limit := r.Max
	if limit <= 0 {
		limit = DefaultMaxWindow
	}
	clamp := func(n int) int { return min(max(n, 1), limit) }
	share := 1.0
	if total := now.Running + now.Waiting; total > 0 {
		share = min(1, float64(ours)/total)
	}
	// A request that has just arrived waits for the engine's next step
	// even on a server with free slots: the queue that counts is the one
	// that lasted from the reading before to this one, and the batch the
	// larger of the two readings'.
	queued, running := now.Waiting, now.Running
	if prev != nil {
		queued, running = min(queued, prev.Waiting), max(running, prev.Running)
	}
	allow := allowance(running)
	// A queue beside free slots is the engine catching up (admission at
	// its next step, a burst of prefill), not a lack of room: the batch
	// is full when as many run as ever ran with a queue, or the KV cache
	// is (vLLM admits while it has blocks).
	full := r.Ceiling == 0 || running >= 0.95*r.Ceiling || now.KVUsage >= kvHighWater
	switch {
	case queued > 0:
		r.Ceiling = max(r.Ceiling, running)
	case now.Waiting == 0 && now.Running > r.Ceiling:
		r.Ceiling = 0 // more run than we thought fit: unknown again
	}
	switch {
	case prev != nil && now.Preemptions > prev.Preemptions && ours > 0:
		n := clamp(min(int(math.Floor(share*now.Running)), int(math.Floor(0.9*float64(cur)))))
		return n, reasonIf(n != cur, "preemptions")
	case queued > allow && ours > 0 && full:
		n := clamp(min(cur, int(math.Ceil(share*(running+allow)))))
		return n, reasonIf(n != cur, "requests waiting")
	case now.Waiting == 0 && now.KVUsage < kvHighWater && float64(ours)+allow/2 >= float64(cur):
		n := max(cur+1, int(math.Ceil(1.5*float64(cur))))
		if r.Ceiling > 0 {
			n = max(cur+1, min(n, int(math.Ceil(r.Ceiling+allowance(r.Ceiling)))))
		}
		n = clamp(n)
		return n, reasonIf(n != cur, "free slots")
	}
	return clamp(cur), reasonIf(clamp(cur) != cur, "bounds")
}

func reasonIf(changed bool, why string) string {
	if changed {
		return why
	}
	return ""
}
