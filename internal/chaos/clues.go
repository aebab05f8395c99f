package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// maxClueLines bounds how many log lines naming traced ids a report
// quotes.
const maxClueLines = 60

// workerHeartbeats describes the last heartbeat of every worker of run
// kept in the events stream: what each said it held and why it was not
// pulling. A stalled run is most often a worker holding prompts it does
// not work on, and this is where that shows.
func workerHeartbeats(ctx context.Context, js jetstream.JetStream, run string) string {
	var b strings.Builder
	events, err := js.Stream(ctx, schema.EventsStream)
	if err != nil {
		fmt.Fprintf(&b, "  heartbeats: %v\n", err)
		return b.String()
	}
	info, err := events.Info(ctx, jetstream.WithSubjectFilter(schema.HeartbeatFilter(run)))
	if err != nil {
		fmt.Fprintf(&b, "  heartbeats: %v\n", err)
		return b.String()
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for s := range info.State.Subjects {
		subjects = append(subjects, s)
	}
	slices.Sort(subjects)
	for _, s := range subjects {
		m, err := events.GetLastMsgForSubject(ctx, s)
		if err != nil {
			fmt.Fprintf(&b, "  heartbeat %s: %v\n", s, err)
			continue
		}
		var hb schema.Heartbeat
		if err := json.Unmarshal(m.Data, &hb); err != nil {
			fmt.Fprintf(&b, "  heartbeat %s: %v\n", s, err)
			continue
		}
		free := "?"
		if hb.FreeSlots != nil {
			free = fmt.Sprint(*hb.FreeSlots)
		}
		fmt.Fprintf(&b, "  worker %-18s heartbeat %v old: window %d, in flight %d, free slots %s, completed %d, paused %v %s, tail hold %v, consumer full %v, interim turns %d, tokens in flight %v\n",
			hb.Worker, time.Since(hb.Time).Round(time.Millisecond), hb.Window, hb.InFlight, free, hb.Completed,
			hb.Paused, hb.PausedReason, hb.TailHold, hb.ConsumerFull, hb.InterimTurns, hb.InFlightTokens)
	}
	if len(subjects) == 0 {
		b.WriteString("  no worker heartbeat stored\n")
	}
	return b.String()
}

// logsNaming quotes the lines of the logs in dir that name one of ids,
// in file order, up to maxClueLines: what every process said about the
// prompts a run lost or stalled on.
func logsNaming(dir string, ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(files) == 0 {
		return ""
	}
	slices.Sort(files)
	var b strings.Builder
	n := 0
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() && n < maxClueLines {
			line := sc.Text()
			for _, id := range ids {
				if strings.Contains(line, id) {
					fmt.Fprintf(&b, "  %s: %s\n", filepath.Base(path), line)
					n++
					break
				}
			}
		}
		f.Close()
	}
	if n == 0 {
		return ""
	}
	return "log lines naming those ids:\n" + b.String()
}
