package worker

import (
	"testing"
	"time"
)

// Against a backend whose time runs faster than wall time, the defaults
// of the poll and of the hand-back wait are that much shorter, down to
// 10 ms; values given are kept.
func TestConfigInBackendTime(t *testing.T) {
	for _, c := range []struct {
		cfg            Config
		poll, handBack time.Duration
	}{
		{Config{Run: "r"}, DefaultWindowPoll, DefaultHandBackAfter},
		{Config{Run: "r", Speed: 1}, DefaultWindowPoll, DefaultHandBackAfter},
		{Config{Run: "r", Speed: 20}, 50 * time.Millisecond, 250 * time.Millisecond},
		{Config{Run: "r", Speed: 200}, 10 * time.Millisecond, 25 * time.Millisecond},
		{Config{Run: "r", Speed: 200, WindowPoll: time.Second, HandBackAfter: -1}, time.Second, -1},
	} {
		got := c.cfg.withDefaults()
		if got.WindowPoll != c.poll || got.HandBackAfter != c.handBack {
			t.Errorf("speed %v: poll %v, hand back after %v; want %v, %v", c.cfg.Speed, got.WindowPoll, got.HandBackAfter, c.poll, c.handBack)
		}
	}
	if err := (Config{Run: "r", Speed: -1}).Validate(); err == nil {
		t.Error("a negative speed was taken")
	}
}
