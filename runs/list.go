package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/jsrequest"
	"github.com/aerie-dev/aerie/schema"
)

// Summary describes one run: its manifest and, when its aggregator has
// published one, its last throughput event.
type Summary struct {
	Run   string `json:"run"`
	Model string `json:"model"`
	// Total is the manifest's Total: the output lines the run expects,
	// prompts times samples.
	Total     int       `json:"total"`
	CreatedAt time.Time `json:"created_at"`
	// Producer is the host that produced the run.
	Producer string `json:"producer"`
	// Priority, Weight and Paused are the run's schedule (aerie runs
	// set), Weight with its default filled in.
	Priority int     `json:"priority"`
	Weight   float64 `json:"weight"`
	Paused   bool    `json:"paused"`
	// Needs are the features a reader must implement to handle the run
	// (schema.Manifest.Needs), and WrittenBy the aerie version that
	// produced it.
	Needs     []string `json:"needs,omitempty"`
	WrittenBy string   `json:"written_by,omitempty"`
	// Progress is nil when no throughput event of the run is kept (none
	// was published, or the last is older than the events stream keeps).
	Progress *Progress `json:"progress,omitempty"`
	// Problem says why the manifest could not be read; Model, Total,
	// CreatedAt and Producer are then zero.
	Problem string `json:"problem,omitempty"`
}

// Progress is what the last throughput event of a run said.
type Progress struct {
	Completed int          `json:"completed"`
	Failed    int          `json:"failed"`
	Phase     schema.Phase `json:"phase"`
	// At is when the server stored the event.
	At time.Time `json:"at"`
	// AgeSec is how old the event was when the runs were listed, in
	// seconds.
	AgeSec float64 `json:"age_sec"`
}

// List returns every run whose manifest is in the runs bucket, sorted by
// name, with its progress. A server where nothing was produced has no
// runs bucket: then the list is empty.
func List(ctx context.Context, js jetstream.JetStream, opts Options) ([]Summary, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	entries, err := manifests(ctx, js, opts)
	if err != nil {
		return nil, err
	}
	events, err := jsrequest.Stream(ctx, js, opts, schema.EventsStream)
	if err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(entries))
	for _, e := range entries {
		s := summarize(e)
		if events != nil {
			if s.Progress, err = lastProgress(ctx, events, opts, s.Run); err != nil {
				return nil, err
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Summary) int { return strings.Compare(a.Run, b.Run) })
	return out, nil
}

// manifests returns the current entry of every key in the runs bucket.
func manifests(ctx context.Context, js jetstream.JetStream, opts Options) ([]jetstream.KeyValueEntry, error) {
	kv, err := jsrequest.Bucket(ctx, js, opts, schema.RunsBucket)
	if err != nil || kv == nil {
		return nil, err
	}
	var entries []jetstream.KeyValueEntry
	err = request(ctx, opts, "read the manifests in KV bucket "+schema.RunsBucket, func(ctx context.Context) error {
		entries = entries[:0]
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return err
		}
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case e, ok := <-w.Updates():
				if !ok {
					return errors.New("watch ended before every key was read")
				}
				if e == nil { // every current value delivered
					return nil
				}
				entries = append(entries, e)
			}
		}
	})
	return entries, err
}

func summarize(e jetstream.KeyValueEntry) Summary {
	m, err := schema.DecodeManifest(e.Value())
	if err != nil {
		return Summary{Run: e.Key(), Problem: fmt.Sprintf("manifest cannot be read: %v", err)}
	}
	return Summary{Run: e.Key(), Model: m.Model, Total: m.Total, CreatedAt: m.CreatedAt, Producer: m.Producer,
		Priority: m.Priority, Weight: m.Share(), Paused: m.Paused, Needs: m.Needs, WrittenBy: m.WrittenBy}
}

// lastProgress reads the last throughput event of run, or nil when the
// events stream holds none.
func lastProgress(ctx context.Context, events jetstream.Stream, opts Options, run string) (*Progress, error) {
	msg, err := jsrequest.LastMsg(ctx, events, opts, schema.ThroughputSubject(run))
	if err != nil || msg == nil {
		return nil, err
	}
	var ev schema.Throughput
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		return nil, nil // an unreadable event says nothing about progress
	}
	return &Progress{Completed: ev.Completed, Failed: ev.Failed, Phase: ev.Phase,
		At: msg.Time, AgeSec: time.Since(msg.Time).Seconds()}, nil
}
