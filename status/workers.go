package status

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// maxHeartbeats bounds the heartbeats one read takes in: far more than
// the last ones of every worker, or the few seconds of the rate window,
// of any real deployment.
const maxHeartbeats = 10000

// heartbeat is one stored heartbeat.
type heartbeat struct {
	schema.Heartbeat
	subject string
	at      time.Time // when the server stored it
}

// gatherWorkers reads every worker's last heartbeat (one message per
// heartbeat subject of the run), then the heartbeats of the last
// RateWindow, to measure each live worker's tokens/s.
func gatherWorkers(ctx context.Context, r reader, st *Run, opts Options, now time.Time) error {
	events, err := r.stream(ctx, schema.EventsStream)
	if err != nil || events == nil {
		return err
	}
	filter := schema.HeartbeatFilter(st.Run)
	last, err := readHeartbeats(ctx, r, events, jetstream.ConsumerConfig{
		FilterSubject: filter, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil || len(last) == 0 {
		return err
	}
	// A heartbeat published while the read runs is delivered after the
	// last ones per subject: keep one, the newest, per worker.
	last = newestPerSubject(last)
	var newest time.Time
	for _, hb := range last {
		if hb.at.After(newest) {
			newest = hb.at
		}
	}
	var rates map[string]float64
	if now.Sub(newest) <= opts.StaleAfter {
		start := newest.Add(-opts.RateWindow)
		recent, err := readHeartbeats(ctx, r, events, jetstream.ConsumerConfig{
			FilterSubject: filter, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start,
		})
		if err != nil {
			return err
		}
		rates = tokenRates(recent)
	}
	for _, hb := range last {
		w := workerOf(hb, now, opts.StaleAfter)
		if rate, ok := rates[hb.subject]; ok && !w.Heartbeat.Stale {
			w.TokensPerSec = rate
		}
		if !w.Heartbeat.Stale {
			st.LiveWorkers++
			st.InFlight += w.InFlight
		}
		st.Workers = append(st.Workers, w)
	}
	slices.SortFunc(st.Workers, func(a, b Worker) int {
		if a.Heartbeat.Stale != b.Heartbeat.Stale {
			if a.Heartbeat.Stale {
				return 1
			}
			return -1
		}
		if a.Heartbeat.Stale { // most recent first
			return b.Heartbeat.At.Compare(a.Heartbeat.At)
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if len(st.Workers) > opts.MaxWorkers {
		st.WorkersNotShown = len(st.Workers) - max(opts.MaxWorkers, st.LiveWorkers)
		st.Workers = st.Workers[:max(opts.MaxWorkers, st.LiveWorkers)]
	}
	return nil
}

// workerOf is the worker line of a heartbeat.
func workerOf(hb heartbeat, now time.Time, staleAfter time.Duration) Worker {
	name := hb.Worker
	if name == "" {
		name = hb.subject[strings.LastIndexByte(hb.subject, '.')+1:]
	}
	w := Worker{
		Name: name, Version: hb.Version, Lacks: hb.Lacks, LacksWrittenBy: hb.LacksWrittenBy,
		Host: hb.Host, Backend: hb.Backend, Window: hb.Window,
		InFlight: len(hb.InFlightTokens), Held: hb.InFlight,
		TokensPerSec: -1, BackInSec: -1, TokensStreamed: hb.TokensStreamed, Completed: hb.Completed,
		DeadLettered: hb.DeadLettered, Retried: hb.Retried, Heartbeat: age(hb.at, now, staleAfter),
		Hedges: hb.Hedges, HedgesWon: hb.HedgesWon,
	}
	switch {
	case hb.Paused:
		w.Paused = hb.PausedReason
		if w.Paused == "" {
			w.Paused = "no reason given"
		}
	case hb.TailHold:
		w.Holding = HoldingTail
	case hb.HintHold:
		w.Holding = HoldingHints
	}
	return w
}

// tokenRates measures, for each heartbeat subject, the tokens streamed
// per second between its first and last heartbeat in hbs. A worker's
// counters are cumulative and its clock its own, so the rate is right
// whatever the skew between hosts.
func tokenRates(hbs []heartbeat) map[string]float64 {
	first, last := map[string]heartbeat{}, map[string]heartbeat{}
	for _, hb := range hbs {
		if f, ok := first[hb.subject]; !ok || hb.Time.Before(f.Time) {
			first[hb.subject] = hb
		}
		if l, ok := last[hb.subject]; !ok || hb.Time.After(l.Time) {
			last[hb.subject] = hb
		}
	}
	rates := map[string]float64{}
	for subject, f := range first {
		l := last[subject]
		span := l.Time.Sub(f.Time).Seconds()
		if span <= 0 || l.TokensStreamed < f.TokensStreamed {
			continue
		}
		rates[subject] = float64(l.TokensStreamed-f.TokensStreamed) / span
	}
	return rates
}

// readHeartbeats reads the heartbeats cfg selects through a consumer
// that lives only as long as the read: the server counts what it
// selects (NumPending), so the read takes exactly that many and never
// waits for more.
func readHeartbeats(ctx context.Context, r reader, events jetstream.Stream, cfg jetstream.ConsumerConfig) ([]heartbeat, error) {
	cfg.Description = "aerie status: reads heartbeats"
	cfg.AckPolicy = jetstream.AckNonePolicy
	cfg.MemoryStorage = true
	cfg.InactiveThreshold = time.Minute // gone soon if the delete below fails
	var out []heartbeat
	err := r.do(ctx, "read the heartbeats on "+cfg.FilterSubject, func(ctx context.Context) error {
		out = out[:0]
		c, err := events.CreateConsumer(ctx, cfg)
		if err != nil {
			return err
		}
		defer func() { _ = events.DeleteConsumer(context.WithoutCancel(ctx), c.CachedInfo().Name) }()
		n := min(c.CachedInfo().NumPending, maxHeartbeats)
		for n > 0 {
			batch, err := c.Fetch(int(min(n, 1000)), jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return err
			}
			got := 0
			for m := range batch.Messages() {
				got++
				meta, err := m.Metadata()
				if err != nil {
					continue
				}
				hb := heartbeat{subject: m.Subject(), at: meta.Timestamp}
				if json.Unmarshal(m.Data(), &hb.Heartbeat) != nil {
					continue // an unreadable heartbeat says nothing
				}
				out = append(out, hb)
			}
			if err := batch.Error(); err != nil {
				return err
			}
			if got == 0 {
				return nil // the rest expired meanwhile
			}
			n -= uint64(got)
		}
		return nil
	})
	return out, err
}

// newestPerSubject keeps the newest heartbeat of each subject, in the
// order the subjects first appear.
func newestPerSubject(hbs []heartbeat) []heartbeat {
	at := make(map[string]int, len(hbs))
	out := hbs[:0:0]
	for _, hb := range hbs {
		i, seen := at[hb.subject]
		switch {
		case !seen:
			at[hb.subject] = len(out)
			out = append(out, hb)
		case hb.at.After(out[i].at):
			out[i] = hb
		}
	}
	return out
}
