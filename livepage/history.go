package livepage

// Point is one moment of the run in the history the charts draw.
type Point struct {
	// T is the event's time in Unix milliseconds.
	T         int64 `json:"t"`
	Completed int   `json:"completed"`
	// RequestsPerSec and TokensPerSec are the event's windowed rates.
	RequestsPerSec float64 `json:"requests_per_sec"`
	TokensPerSec   float64 `json:"tokens_per_sec"`
	// ETASec, ETALowSec and ETAHighSec are the event's; negative when
	// unknown.
	ETASec     float64 `json:"eta_sec"`
	ETALowSec  float64 `json:"eta_low_sec"`
	ETAHighSec float64 `json:"eta_high_sec"`
}

// DefaultHistory is how many points the history keeps: enough for a
// chart as wide as a screen, whatever the length of the run.
const DefaultHistory = 300

// history keeps at most max points spread over the whole run. When it is
// full it drops every other point and from then on keeps a point only
// when it is at least gap after the one before, so a twelve-hour run
// takes as much memory as a twelve-minute one and its chart still starts
// at the beginning. The newest point is always kept.
type history struct {
	max    int
	gap    int64 // milliseconds; zero keeps every point
	points []Point
}

func newHistory(max int) *history {
	return &history{max: max, points: make([]Point, 0, max+1)}
}

func (h *history) add(p Point) {
	if n := len(h.points); n > 0 && p.T < h.points[n-1].T {
		return // out of order: the chart runs forwards
	}
	h.points = append(h.points, p)
	// The point before the newest stays only if it is far enough from
	// its own predecessor.
	if n := len(h.points); n >= 3 && h.points[n-2].T-h.points[n-3].T < h.gap {
		h.points = append(h.points[:n-2], p)
	}
	if len(h.points) > h.max {
		h.compact()
	}
}

// compact keeps the first point, every other one after it, and the newest;
// then widens gap so that the history fills again over as long as it
// spans now.
func (h *history) compact() {
	newest := h.points[len(h.points)-1]
	kept := h.points[:0]
	for i := 0; i < len(h.points)-1; i += 2 {
		kept = append(kept, h.points[i])
	}
	kept = append(kept, newest)
	h.points = kept
	if span := newest.T - kept[0].T; span > 0 {
		h.gap = max(h.gap, 2*span/int64(h.max))
	}
}

// snapshot returns a copy of the points.
func (h *history) snapshot() []Point {
	return append([]Point(nil), h.points...)
}
