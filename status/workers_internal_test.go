package status

import (
	"testing"
	"time"
)

// A heartbeat that arrives while the last ones per worker are read comes
// after them; the worker is listed once, with the newer one.
func TestNewestPerSubject(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hb := func(subject string, sec int) heartbeat {
		return heartbeat{subject: subject, at: t0.Add(time.Duration(sec) * time.Second)}
	}
	got := newestPerSubject([]heartbeat{hb("a", 1), hb("b", 2), hb("a", 3), hb("b", 1)})
	if len(got) != 2 || got[0].subject != "a" || !got[0].at.Equal(t0.Add(3*time.Second)) ||
		got[1].subject != "b" || !got[1].at.Equal(t0.Add(2*time.Second)) {
		t.Errorf("newestPerSubject = %+v, want a at 3s then b at 2s", got)
	}
}
