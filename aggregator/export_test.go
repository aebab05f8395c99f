package aggregator

import "time"

// SetFetchWait sets how long a's fetches last, so that a test can tell a
// fetch given up from one waited out.
func SetFetchWait(a *Aggregator, d time.Duration) { a.fetchWait = d }
