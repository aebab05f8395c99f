package status_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/status"
)

// Watch draws until its context ends, clears the screen only when told
// to (stdout is a terminal), and shows a frame's error in its place.
func TestWatch(t *testing.T) {
	for _, clear := range []bool{false, true} {
		var out bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		frames := 0
		err := status.Watch(ctx, &out, time.Millisecond, clear, "\n", func(_ context.Context, w io.Writer) error {
			frames++
			if frames == 2 {
				return errors.New("server gone")
			}
			if frames == 3 {
				cancel()
			}
			_, err := fmt.Fprintf(w, "frame %d\n", frames)
			return err
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		s := out.String()
		if got := strings.Count(s, "\x1b[H\x1b[2J"); clear && got != 3 || !clear && got != 0 {
			t.Errorf("clear=%v: %d screen clears in %q", clear, got, s)
		}
		if !strings.Contains(s, "frame 1\n") || !strings.Contains(s, "server gone") || !strings.Contains(s, "frame 3\n") {
			t.Errorf("clear=%v: frames %q", clear, s)
		}
		if !clear && !strings.Contains(s, "frame 1\n\n") {
			t.Errorf("frames not kept apart: %q", s)
		}
	}
	if err := status.Watch(context.Background(), io.Discard, 0, false, "", nil); err == nil {
		t.Error("a zero interval was accepted")
	}
}
