package doctor

import (
	"fmt"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/bytesize"
)

// formatBytes renders n in binary units (bytesize.Format).
func formatBytes[T int | int64 | uint64](n T) string { return bytesize.Format(n) }

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
