package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/aggregator"
)

// aggregatorSettled reports whether the aggregator has been running long
// enough to hold the run: a second one started earlier could find the
// first not yet started (or dead) and rightly take its place.
func (h *Harness) aggregatorSettled() bool {
	a := h.aggregator
	return a != nil && !a.exited() && time.Since(a.started) >= settle
}

// superviseSeconds checks the second aggregators that have exited: each
// must have given up, naming the running one. One that ran to the end,
// or failed for another reason, fails the run.
func (h *Harness) superviseSeconds() error {
	for i := 0; i < len(h.seconds); i++ {
		p := h.seconds[i]
		if !p.exited() {
			if time.Since(p.started) > secondLeaseWait+time.Minute {
				return fmt.Errorf("%s (pid %d) still runs %v after it started beside %s: it should have given up after %v\n%s",
					p.name, p.pid(), time.Since(p.started).Round(time.Second), h.aggregator.name, secondLeaseWait, p.tail(10))
			}
			continue
		}
		h.seconds = append(h.seconds[:i], h.seconds[i+1:]...)
		i--
		tail := p.tail(5)
		if p.err == nil {
			return fmt.Errorf("%s ran to the end beside %s: two aggregators wrote one run\n%s", p.name, h.aggregator.name, tail)
		}
		if !strings.Contains(tail, "being written by another aggregator") {
			return fmt.Errorf("%s exited (%s) without saying that another aggregator writes the run\n%s", p.name, p.exitStatus(), tail)
		}
		h.kills.Refused++
		h.log("%s gave up as it should (%s)", p.name, p.exitStatus())
	}
	return nil
}

// rotateKey changes the simulator's API key, as a vLLM restarted with
// another --api-key: the running workers get 401s until their key file
// holds the new key, KeyFileLag later.
func (h *Harness) rotateKey() error {
	h.kills.KeyRotations++
	h.apiKey = "chaos-key-" + strconv.Itoa(h.kills.KeyRotations+1)
	req, err := http.NewRequest(http.MethodPost, "http://"+h.simAddr+"/admin/api-key", strings.NewReader(h.apiKey))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("rotate the simulator's key: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("rotate the simulator's key: status %d", resp.StatusCode)
	}
	h.keyDue = time.Now().Add(h.cfg.KeyFileLag)
	h.log("simulator's API key changed at %s; the workers' key file follows in %v", &h.progress, h.cfg.KeyFileLag)
	return nil
}

// updateKeyFile writes the simulator's current key to the workers' key
// file, as an operator fixing it would (a new file renamed into place).
func (h *Harness) updateKeyFile() error {
	tmp := h.keyFile + ".new"
	if err := os.WriteFile(tmp, []byte(h.apiKey+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, h.keyFile); err != nil {
		return err
	}
	h.keyDue = time.Time{}
	h.log("workers' key file updated at %s", &h.progress)
	return nil
}

// finishRotation completes a key rotation under way: when its lag is
// over, the workers' key file gets the simulator's new key.
func (h *Harness) finishRotation(ctx context.Context) error {
	if h.keyDue.IsZero() {
		return nil
	}
	t := time.NewTimer(time.Until(h.keyDue))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return h.updateKeyFile()
}

// replayedCount reads "replayed N" from aerie replay's report.
var replayedCount = regexp.MustCompile(`(?m)\breplayed (\d+)`)

// replayAfterDone does what an operator does once a run is done with
// failures: `aerie replay`, then the aggregator again as deploy/ runs it
// (--exit-when-done), which must finish only once every replayed prompt
// has its new outcome. The workers are still running.
func (h *Harness) replayAfterDone(ctx context.Context) error {
	if h.cfg.turnsAll() {
		failed, _, err := readOutput(filepath.Join(h.data, h.cfg.Run, aggregator.FailedFile))
		if err != nil {
			return err
		}
		for _, l := range failed {
			if l.Turn > 1 {
				h.kills.ReplayedAfterStoredTurns++
			}
		}
	}
	p, err := h.start(h.next("replay"), "replay", "--nats", h.NATSURL(), "--run", h.cfg.Run)
	if err != nil {
		return err
	}
	if err := p.wait(2 * time.Minute); err != nil {
		return fmt.Errorf("%s: %w\n%s", p.name, err, p.tail(20))
	}
	out := p.tail(10)
	if m := replayedCount.FindStringSubmatch(out); m != nil {
		h.kills.ReplayedAfterDone, _ = strconv.Atoi(m[1])
	}
	h.log("%s after the run was done: %s", p.name, strings.Join(strings.Fields(out), " "))
	if h.kills.ReplayedAfterDone == 0 {
		return nil
	}
	if err := h.startAggregator(); err != nil {
		return err
	}
	a := h.aggregator
	deadline := time.NewTimer(h.cfg.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !a.exited() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			h.log("%s did not finish the replayed prompts within %v", a.name, h.cfg.Timeout)
			return ErrStalled
		case <-tick.C:
		}
		if err := h.superviseWorkers(); err != nil {
			return err
		}
	}
	if a.err != nil {
		return fmt.Errorf("%s, started after the replay, failed: %s\n%s", a.name, a.exitStatus(), a.tail(10))
	}
	h.log("%s finished the replayed prompts: %s written", a.name, &h.progress)
	return nil
}
