package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// maxTraced bounds how many ids natsState looks up one by one.
const maxTraced = 20

// unitOf is the unit of work of an input key: an id (sample 0) or,
// with Config.Samples, "id#k" for sample k (see unitKey); the subjects,
// failure counts and output lines of a run are per unit.
func unitOf(key string) schema.Unit {
	if i := strings.LastIndexByte(key, '#'); i > 0 {
		if k, err := strconv.Atoi(key[i+1:]); err == nil && k > 0 {
			return schema.Unit{ID: key[:i], Sample: k}
		}
	}
	return schema.Unit{ID: key}
}

// unitKey is the check's key of a unit: its id for sample 0, "id#k" for
// sample k. Generated ids never hold '#'.
func unitKey(id string, sample int) string {
	if sample == 0 {
		return id
	}
	return id + "#" + strconv.Itoa(sample)
}

// withSamples returns input with a prompt for each of its samples above
// the first, keyed by unitKey; input itself with one sample.
func withSamples(input []inputPrompt, samples int) []inputPrompt {
	if samples <= 1 {
		return input
	}
	out := make([]inputPrompt, 0, len(input)*samples)
	for _, p := range input {
		for k := range samples {
			q := p
			q.ID = unitKey(p.ID, k)
			out = append(out, q)
		}
	}
	return out
}

// natsState describes what the NATS server holds for run: the streams,
// the run's consumers, its workers' last heartbeats and, for each of ids (up to maxTraced),
// whether a result or a dead letter is stored and how many failures were
// counted against it. It is what a person looks at first when a run
// stalls or the output is wrong.
func natsState(url, run string, ids []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "NATS state at %s:\n", url)
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		fmt.Fprintf(&b, "  cannot connect: %v\n", err)
		return b.String()
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintf(&b, "  JetStream: %v\n", err)
		return b.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	streams := map[string]jetstream.Stream{}
	for _, name := range []string{schema.PromptsStream, schema.ResultsStream, schema.DeadStream, schema.TurnsStream} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			fmt.Fprintf(&b, "  stream %s: %v\n", name, err)
			continue
		}
		streams[name] = s
		st := s.CachedInfo().State
		fmt.Fprintf(&b, "  stream %-14s %d messages, last seq %d\n", name, st.Msgs, st.LastSeq)
	}
	for _, c := range runConsumers(run) {
		cons, err := js.Consumer(ctx, c.stream, c.name)
		if err != nil {
			fmt.Fprintf(&b, "  consumer %s: %v\n", c.name, err)
			continue
		}
		i, err := cons.Info(ctx)
		if err != nil {
			fmt.Fprintf(&b, "  consumer %s: %v\n", c.name, err)
			continue
		}
		fmt.Fprintf(&b, "  consumer %-24s pending %d, ack pending %d, redelivered %d, waiting pulls %d, delivered seq %d (consumer seq %d), ack floor %d, ack wait %v, max deliver %d\n",
			c.name, i.NumPending, i.NumAckPending, i.NumRedelivered, i.NumWaiting,
			i.Delivered.Stream, i.Delivered.Consumer, i.AckFloor.Stream, i.Config.AckWait, i.Config.MaxDeliver)
	}

	b.WriteString(workerHeartbeats(ctx, js, run))

	attempts, _ := js.KeyValue(ctx, schema.AttemptsBucket)
	for n, id := range ids {
		if n == maxTraced {
			fmt.Fprintf(&b, "  ... and %d more ids\n", len(ids)-n)
			break
		}
		u := unitOf(id)
		fmt.Fprintf(&b, "  id %s: prompt %s; result %s; dead letter %s; failures counted %s\n", id,
			stored(ctx, streams[schema.PromptsStream], schema.PromptSubject(run, u)),
			stored(ctx, streams[schema.ResultsStream], schema.ResultSubject(run, u)),
			stored(ctx, streams[schema.DeadStream], schema.DeadSubject(run, u)),
			failures(ctx, attempts, schema.AttemptsKey(run, u)))
	}
	return b.String()
}

// runConsumers lists the durable consumers of a run: the workers' and
// the aggregator's.
func runConsumers(run string) []struct{ stream, name string } {
	return []struct{ stream, name string }{
		{schema.PromptsStream, schema.WorkersConsumer(run)},
		{schema.ResultsStream, schema.ResultsConsumer(run)},
		{schema.DeadStream, schema.DeadConsumer(run)},
		{schema.AdvisoriesStream, schema.AdvisoriesConsumer(run)},
	}
}

// idle reports whether nothing is left for the run's processes to do:
// no consumer of the run has a message pending or unacknowledged (a
// prompt waiting out a delayed NAK counts as unacknowledged). Together
// with output that does not grow, that is a run that is stuck.
func idle(ctx context.Context, js jetstream.JetStream, run string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, c := range runConsumers(run) {
		cons, err := js.Consumer(ctx, c.stream, c.name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		i, err := cons.Info(ctx)
		if err != nil {
			return false, err
		}
		if i.NumPending > 0 || i.NumAckPending > 0 {
			return false, nil
		}
	}
	return true, nil
}

// stored says whether subject holds a message in s, and which.
func stored(ctx context.Context, s jetstream.Stream, subject string) string {
	if s == nil {
		return "unknown"
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "none"
	}
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	desc := fmt.Sprintf("seq %d at %s", m.Sequence, m.Time.Format("15:04:05.000"))
	if w := m.Header.Get(schema.HeaderWorker); w != "" {
		desc += " by " + w
	}
	if r := m.Header.Get(schema.HeaderReason); r != "" {
		desc += " (" + r + ")"
	}
	return desc
}

func failures(ctx context.Context, kv jetstream.KeyValue, key string) string {
	if kv == nil {
		return "unknown"
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "0"
	}
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return string(e.Value())
}

// unreplayable waits, up to idle, until the run's workers consumer has
// nothing pending and nothing unacknowledged, then returns the ids of
// failed that have neither a dead letter nor a result. A failed prompt
// must keep its dead letter: `aerie replay` works from AERIE_DEAD only,
// and `aerie reconcile` leaves alone the ids in failed.jsonl. A replayed
// prompt may have lost its dead letter to the replay and still be with
// a worker, hence the wait; checked is false if the workers did not go
// idle in time.
func unreplayable(ctx context.Context, url, run string, failed []string, idle time.Duration) (ids []string, checked bool, err error) {
	if len(failed) == 0 {
		return nil, true, nil
	}
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, false, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, idle+30*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, schema.PromptsStream, schema.WorkersConsumer(run))
	if err != nil {
		return nil, false, err
	}
	deadline := time.NewTimer(idle)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		i, err := cons.Info(ctx)
		if err != nil {
			return nil, false, err
		}
		if i.NumPending == 0 && i.NumAckPending == 0 {
			break
		}
		select {
		case <-deadline.C:
			return nil, false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-tick.C:
		}
	}
	dead, err := js.Stream(ctx, schema.DeadStream)
	if err != nil {
		return nil, false, err
	}
	results, err := js.Stream(ctx, schema.ResultsStream)
	if err != nil {
		return nil, false, err
	}
	for _, id := range failed {
		has := func(s jetstream.Stream, subject string) (bool, error) {
			_, err := s.GetLastMsgForSubject(ctx, subject)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return false, nil
			}
			return err == nil, err
		}
		d, err := has(dead, schema.DeadSubject(run, unitOf(id)))
		if err != nil {
			return nil, false, err
		}
		r, err := has(results, schema.ResultSubject(run, unitOf(id)))
		if err != nil {
			return nil, false, err
		}
		if !d && !r {
			ids = append(ids, id)
		}
	}
	return ids, true, nil
}

// answeredNotWritten returns the input ids whose answer AERIE_RESULTS
// holds but completions.jsonl does not: one listing of the run's result
// subjects, compared by subject token.
func answeredNotWritten(ctx context.Context, url, run string, input []string, completed map[string]bool) ([]string, error) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	results, err := js.Stream(ctx, schema.ResultsStream)
	if err != nil {
		return nil, err
	}
	info, err := results.Info(ctx, jetstream.WithSubjectFilter(schema.RunFilter(schema.ResultsRoot, run)))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, id := range input {
		if info.State.Subjects[schema.ResultSubject(run, unitOf(id))] > 0 && !completed[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}
