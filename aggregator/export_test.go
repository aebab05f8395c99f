package aggregator

import "time"

// SetFetchWait sets how long a's fetches last, so that a test can tell a
// fetch given up from one waited out.
func SetFetchWait(a *Aggregator, d time.Duration) { a.fetchWait = d }

// SetUnwrittenLook sets the time between two looks for lines nothing
// will bring, and returns what restores it.
func SetUnwrittenLook(d time.Duration) (restore func()) {
	old := unwrittenLook
	unwrittenLook = d
	return func() { unwrittenLook = old }
}
