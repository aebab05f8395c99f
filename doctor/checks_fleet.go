package doctor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/schema"
)

// fleetRecent is how old a worker's last heartbeat may be for it to count
// as part of the fleet: a few missed periods, not a worker long gone.
const fleetRecent = 2 * time.Minute

// maxFleetBeats bounds the heartbeats the fleet check reads: the last of
// each worker and run, far more than any fleet has.
const maxFleetBeats = 20000

// fleetVersion is what the fleet check found of one aerie version.
type fleetVersion struct {
	version  string
	workers  map[string]bool
	features []string // nil: older than feature checks
	lacks    []string // the run's needs it lacks
}

// checkFleet lists the aerie versions of the workers heard from lately
// (their last heartbeats, on any run) and of the run's aggregator, and
// whether each can serve the run: a version that lacks a feature the
// run needs leaves it alone, and a worker older than feature checks
// serves runs of manifest version 1 only. It fails when no recent
// worker can serve the run, and warns when some cannot.
func checkFleet(ctx context.Context, s *session) Result {
	if s.js == nil {
		return skip("no JetStream (see jetstream)")
	}
	filter := schema.EventsRoot + ".*.heartbeat.*"
	if !s.mayPublish("$JS.API.STREAM.INFO."+schema.EventsStream) ||
		!s.mayPublish("$JS.API.CONSUMER.CREATE."+schema.EventsStream+".fleet."+filter) {
		return skip("these credentials may not read the workers' heartbeats: run doctor with the admin seed to see the fleet's versions")
	}
	events, err := s.js.Stream(ctx, schema.EventsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return skip("stream %s does not exist yet: no worker has run", schema.EventsStream)
	}
	if err != nil {
		return fail("check the NATS connection and permissions", "look up stream %s: %v", schema.EventsStream, err)
	}
	beats, err := lastHeartbeats(ctx, events, filter)
	if err != nil {
		return warn("run doctor with the admin credentials to see the fleet", "read the workers' heartbeats: %v", err)
	}
	now := time.Now()
	byVersion := map[string]*fleetVersion{}
	for _, hb := range beats {
		if now.Sub(hb.Time) > fleetRecent || hb.Worker == "" {
			continue
		}
		v := byVersion[hb.Version]
		if v == nil {
			v = &fleetVersion{version: hb.Version, workers: map[string]bool{}, features: hb.Features}
			byVersion[hb.Version] = v
		}
		v.workers[hb.Worker] = true
	}
	m := s.manifest
	var parts []string
	serving, lacking := 0, 0
	for _, v := range slices.SortedFunc(valuesOf(byVersion), func(a, b *fleetVersion) int { return cmp.Compare(a.version, b.version) }) {
		name := "aerie " + v.version
		if v.version == "" {
			name = "aerie older than feature checks"
		}
		text := fmt.Sprintf("%s: %s", name, plural(len(v.workers), "worker"))
		if m != nil {
			switch {
			case v.features == nil && m.V != schema.ManifestVersion1:
				v.lacks = m.Needs
			case v.features != nil:
				for _, f := range m.Needs {
					if !slices.Contains(v.features, f) {
						v.lacks = append(v.lacks, f)
					}
				}
			}
			if len(v.lacks) > 0 {
				text += " CANNOT serve run " + m.Run + " (lacks " + strings.Join(v.lacks, ", ") + ")"
				lacking += len(v.workers)
			} else {
				text += " can serve run " + m.Run
				serving += len(v.workers)
			}
		}
		parts = append(parts, text)
	}
	if agg := aggregatorVersion(ctx, events, m); agg != "" {
		parts = append(parts, agg)
	}
	if len(byVersion) == 0 {
		return skip("no worker heartbeat in the last %v: no worker runs", fleetRecent)
	}
	detail := strings.Join(parts, "; ")
	this := "this doctor is aerie " + schema.BuildVersion()
	switch {
	case m == nil:
		return pass("%s (%s)", detail, this)
	case serving == 0:
		return fail(fmt.Sprintf("upgrade the workers to aerie %s or later (a version that has %s); the run waits for them", orUnknown(m.WrittenBy), strings.Join(m.Needs, ", ")),
			"no recent worker can serve run %s, which needs %s: %s", m.Run, strings.Join(m.Needs, ", "), detail)
	case lacking > 0:
		return warn(fmt.Sprintf("upgrade them to aerie %s or later: until then they take none of the run's prompts", orUnknown(m.WrittenBy)),
			"%s cannot serve run %s: %s", plural(lacking, "worker"), m.Run, detail)
	}
	return pass("%s (%s)", detail, this)
}

func valuesOf(m map[string]*fleetVersion) func(func(*fleetVersion) bool) {
	return func(yield func(*fleetVersion) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// lastHeartbeats reads the last heartbeat of every worker of every run
// through a consumer that lives as long as the read.
func lastHeartbeats(ctx context.Context, events jetstream.Stream, filter string) ([]schema.Heartbeat, error) {
	c, err := events.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       "aerie doctor: reads the fleet's last heartbeats",
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = events.DeleteConsumer(context.WithoutCancel(ctx), c.CachedInfo().Name) }()
	var out []schema.Heartbeat
	for n := min(c.CachedInfo().NumPending, maxFleetBeats); n > 0; {
		batch, err := c.Fetch(int(min(n, 1000)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return out, err
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			var hb schema.Heartbeat
			if json.Unmarshal(msg.Data(), &hb) == nil {
				out = append(out, hb)
			}
		}
		if err := batch.Error(); err != nil {
			return out, err
		}
		if got == 0 {
			break
		}
		n -= uint64(got)
	}
	return out, nil
}

// aggregatorVersion says which aerie the run's aggregator is, from its
// last throughput event, and whether it can write the run; "" when
// unknown.
func aggregatorVersion(ctx context.Context, events jetstream.Stream, m *schema.Manifest) string {
	if m == nil {
		return ""
	}
	msg, err := events.GetLastMsgForSubject(ctx, schema.ThroughputSubject(m.Run))
	if err != nil {
		return ""
	}
	var ev schema.Throughput
	if json.Unmarshal(msg.Data, &ev) != nil || time.Since(msg.Time) > fleetRecent {
		return ""
	}
	switch {
	case len(ev.AggregatorLacks) > 0:
		return fmt.Sprintf("aggregator aerie %s CANNOT write run %s (lacks %s)", ev.AggregatorVersion, m.Run, strings.Join(ev.AggregatorLacks, ", "))
	case ev.AggregatorVersion == "":
		return "aggregator aerie older than feature checks"
	}
	return fmt.Sprintf("aggregator aerie %s writes run %s", ev.AggregatorVersion, m.Run)
}
