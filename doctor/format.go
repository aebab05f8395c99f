package doctor

import (
	"fmt"
	"strings"
	"time"
)

// formatBytes renders n in binary units: "512 B", "3.0 MiB", "1.2 TiB".
func formatBytes[T int | int64 | uint64](n T) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	suffix := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := -1
	for v >= unit && i < len(suffix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, suffix[i])
}

// formatDuration rounds d for a report: milliseconds under ten seconds,
// whole seconds above.
func formatDuration(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// quoteList renders names as [a b c], at most max of them.
func quoteList(names []string, max int) string {
	if len(names) == 0 {
		return "[]"
	}
	shown := names
	more := ""
	if len(names) > max {
		shown = names[:max]
		more = fmt.Sprintf(" and %d more", len(names)-max)
	}
	q := make([]string, len(shown))
	for i, n := range shown {
		q[i] = fmt.Sprintf("%q", n)
	}
	return "[" + strings.Join(q, " ") + "]" + more
}

// plural renders "1 worker", "2 workers".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
