package status

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"
)

// clearScreen moves the cursor home and clears the screen (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// Watch draws a frame every interval until ctx ends, then returns nil.
// Each frame is drawn whole into memory and written at once. With clear
// (out is a terminal), the screen is cleared before each frame; without,
// frames follow one another, between written between two, so that a log
// or a pipe receives them all (JSON frames, one a line, need none).
// An error drawing a frame is shown in its place and the next frame is
// tried: a NATS server that restarts does not end the watch. Only an
// error writing to out does.
func Watch(ctx context.Context, out io.Writer, interval time.Duration, clear bool, between string, draw func(context.Context, io.Writer) error) error {
	if interval <= 0 {
		return fmt.Errorf("status: watch interval %v: use a positive duration", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		var frame bytes.Buffer
		if !clear && !first {
			frame.WriteString(between)
		}
		if clear {
			frame.WriteString(clearScreen)
			fmt.Fprintf(&frame, "every %v, %s; Ctrl-C to stop\n\n", interval, time.Now().Format("15:04:05"))
		}
		if err := draw(ctx, &frame); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(&frame, "%s: %v\n", time.Now().Format("15:04:05"), err)
		}
		if _, err := out.Write(frame.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
