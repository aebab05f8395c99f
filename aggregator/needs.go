package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// waitServable holds an aggregator whose run needs features this build
// lacks, before it takes the run's lease or touches its files: it says
// why in its log once and in a throughput event every EventInterval (so
// that `aerie status` shows it), and returns the run's manifest once it
// is put again as one it can write (provision.WaitServable).
func (a *Aggregator) waitServable(ctx context.Context, m *schema.Manifest, lack *schema.LackError) (*schema.Manifest, error) {
	a.log.Error("leaving the run alone: it needs features this aggregator lacks; nothing of it is written until this host runs an aerie that has them",
		"lacks", lack.Lacking, "written_by", lack.By, "version", schema.BuildVersion(), "err", lack)
	return provision.WaitServable(ctx, a.js, m, lack, a.cfg.EventInterval,
		func(l *schema.LackError) { a.announceLack(ctx, m, l) }, a.log)
}

// announceLack publishes a throughput event of a run this aggregator
// leaves alone for lack, saying what it lacks: the run's last event
// again, so that its counts stand, with the ETA unknown (nothing is
// written meanwhile), or a waiting one when the run has none. It goes to
// the events subject only: the run's files are not this aggregator's to
// write.
//
// It stays silent while another aggregator holds the run's lease, and
// once the run is done: that one's events say what is true of the run,
// and this one's would hide them.
func (a *Aggregator) announceLack(ctx context.Context, m *schema.Manifest, lack *schema.LackError) {
	if a.leaseHeld(ctx, m.Run) {
		return
	}
	ev := schema.Throughput{Run: m.Run, Phase: schema.PhaseWaiting, Total: m.Total}
	if last, ok := a.lastEvent(ctx, m.Run); ok {
		if last.Phase == schema.PhaseDone {
			return
		}
		ev = last
	}
	ev.Time, ev.ETASec, ev.ETALowSec, ev.ETAHighSec = time.Now().UTC(), -1, -1, -1
	ev.AggregatorVersion, ev.AggregatorLacks, ev.AggregatorLacksWrittenBy = schema.BuildVersion(), lack.Lacking, lack.By
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	if err := a.nc.Publish(schema.ThroughputSubject(m.Run), b); err != nil {
		a.log.Warn("publish throughput event", "err", err)
	}
}

// fitting returns the messages of msgs this aggregator can write, and
// hands back, uncounted, those that need a feature it lacks: the first
// such makes it leave the run (lacks), after which it hands back every
// message, since the one it cannot write would be missing from the
// run's files. They wait for an aggregator that has the feature.
func (a *Aggregator) fitting(msgs []jetstream.Msg) []jetstream.Msg {
	fit := msgs[:0:0]
	for _, m := range msgs {
		err := a.needsOK.Check(a.cfg.Run, m.Headers())
		var le *schema.LackError
		if errors.As(err, &le) && a.lacks.CompareAndSwap(nil, le) {
			a.log.Error("leaving the run alone: a message needs a feature this aggregator lacks; nothing more of the run is written, and what comes is handed back uncounted",
				"lacks", le.Lacking, "written_by", le.By, "version", schema.BuildVersion(), "err", le)
		}
		if a.lacks.Load() != nil {
			_ = m.NakWithDelay(a.fetchWait)
			continue
		}
		fit = append(fit, m)
	}
	return fit
}

// leaseHeld reports whether an aggregator holds run's lease: the
// bucket's TTL removes a lease its holder stopped renewing, so a key
// that is there is held.
func (a *Aggregator) leaseHeld(ctx context.Context, run string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := a.js.KeyValue(ctx, schema.LeasesBucket)
	if err != nil {
		return false
	}
	_, err = kv.Get(ctx, schema.AggregatorLeaseKey(run))
	return err == nil
}

// lastEvent is the run's last throughput event in the events stream.
func (a *Aggregator) lastEvent(ctx context.Context, run string) (schema.Throughput, bool) {
	var ev schema.Throughput
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := a.js.Stream(ctx, schema.EventsStream)
	if err != nil {
		return ev, false
	}
	msg, err := s.GetLastMsgForSubject(ctx, schema.ThroughputSubject(run))
	if err != nil || json.Unmarshal(msg.Data, &ev) != nil {
		return ev, false
	}
	return ev, true
}
