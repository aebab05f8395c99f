package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// storeWatch records when each subject of a stream was first stored,
// while the run goes on: the turns of a conversation are removed once
// its result is stored, so they can be seen only as they come. It reads
// headers only, through an ordered consumer that starts again after the
// NATS server is restarted.
type storeWatch struct {
	cons jetstream.Consumer
	cc   jetstream.ConsumeContext

	mu     sync.Mutex
	first  map[string]time.Time // subject -> stream time of its first message
	maxSeq uint64               // highest stream sequence seen
}

// watchStores starts recording the subjects of stream under filter.
func watchStores(ctx context.Context, js jetstream.JetStream, stream, filter string) (*storeWatch, error) {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		HeadersOnly:    true,
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", stream, err)
	}
	w := &storeWatch{cons: cons, first: map[string]time.Time{}}
	w.cc, err = cons.Consume(w.record, jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {}))
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", stream, err)
	}
	return w, nil
}

func (w *storeWatch) record(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.first[m.Subject()]; !ok {
		w.first[m.Subject()] = md.Timestamp
	}
	w.maxSeq = max(w.maxSeq, md.Sequence.Stream)
}

// catchUp waits, up to timeout, until everything the server has
// delivered to the watch has been recorded and nothing more is pending.
func (w *storeWatch) catchUp(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
		i, err := w.cons.Info(ictx)
		icancel()
		if err == nil && i.NumPending == 0 {
			w.mu.Lock()
			seen := w.maxSeq
			w.mu.Unlock()
			if seen >= i.Delivered.Stream {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// stop ends the watch.
func (w *storeWatch) stop() {
	if w != nil && w.cc != nil {
		w.cc.Stop()
	}
}

// times returns a copy of the first store time of every subject seen.
func (w *storeWatch) times() map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]time.Time, len(w.first))
	for s, t := range w.first {
		out[s] = t
	}
	return out
}

// tokens maps the subject token of every input id (its unit, sample 0)
// back to the id.
func tokens(input []inputPrompt) map[string]string {
	m := make(map[string]string, len(input))
	for _, p := range input {
		m[unitOf(p.ID).Token()] = p.ID
	}
	return m
}

// turnOfSubject reads aerie.turns.<run>.<token>.<turn> into the id and
// turn (from 0); ok is false for any other subject.
func turnOfSubject(subject, run string, ids map[string]string) (ref turnRef, ok bool) {
	rest, found := strings.CutPrefix(subject, schema.TurnsRoot+"."+run+".")
	if !found {
		return turnRef{}, false
	}
	token, n, found := strings.Cut(rest, ".")
	if !found {
		return turnRef{}, false
	}
	turn, err := strconv.Atoi(n)
	id, known := ids[token]
	if err != nil || !known {
		return turnRef{}, false
	}
	return turnRef{id: id, turn: turn}, true
}

// resultOfSubject reads aerie.results.<run>.<token> into the id.
func resultOfSubject(subject, run string, ids map[string]string) (string, bool) {
	token, found := strings.CutPrefix(subject, schema.ResultsRoot+"."+run+".")
	if !found {
		return "", false
	}
	id, known := ids[token]
	return id, known
}

// leftoverTurns returns, as "id: turns 1, 2 stored by w3", the completed
// ids whose stored turns AERIE_TURNS still holds. A worker removes a
// conversation's turns once its result is stored; a delivery that ran
// beside the one that finished removes what it stored when it ends too,
// so the check is repeated, until within has passed, while the list is
// not empty. With none, failed lists how many failed conversations kept
// their stored turns, as they must for a replay to continue after them.
func leftoverTurns(ctx context.Context, url, run string, ids map[string]string, completed, failed map[string]bool, within time.Duration) (left []string, kept int, err error) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, within+30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, schema.TurnsStream)
	if err != nil {
		return nil, 0, err
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(schema.RunFilter(schema.TurnsRoot, run)))
		if err != nil {
			return nil, 0, err
		}
		byID := map[string][]string{}
		kept = 0
		keptIDs := map[string]bool{}
		for subject := range info.State.Subjects {
			ref, ok := turnOfSubject(subject, run, ids)
			switch {
			case !ok:
				byID[subject] = append(byID[subject], "not a turn of an input conversation")
			case completed[ref.id]:
				byID[ref.id] = append(byID[ref.id], fmt.Sprintf("turn %d (%s)", ref.turn+1, stored(ctx, s, subject)))
			case failed[ref.id] && !keptIDs[ref.id]:
				keptIDs[ref.id] = true
				kept++
			}
		}
		left = left[:0]
		for id, turns := range byID {
			sort.Strings(turns)
			left = append(left, id+": "+strings.Join(turns, ", "))
		}
		sort.Strings(left)
		if len(left) == 0 {
			return nil, kept, nil
		}
		select {
		case <-deadline.C:
			return left, kept, nil
		case <-ctx.Done():
			return left, kept, ctx.Err()
		case <-tick.C:
		}
	}
}

// concurrentTurns counts, in the workers' logs, the turns a delivery
// finished after another delivery of the same conversation had stored
// them (both ran at once after a redelivery; the first one stored wins).
func concurrentTurns(logs string) int {
	paths, err := filepath.Glob(filepath.Join(logs, "w*.log"))
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		n += strings.Count(string(b), "another delivery stored this turn first")
	}
	return n
}
