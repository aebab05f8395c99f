package simulator

import (
	"sync"
	"sync/atomic"
)

// faultCounts counts injected faults by kind; Stats and /metrics read
// it.
type faultCounts [numFaultKinds]atomic.Int64

func (c *faultCounts) add(k faultKind) { c[k].Add(1) }

// snapshot reads the counts.
func (c *faultCounts) snapshot() FaultCounts {
	return FaultCounts{
		Status400:      c[fault400].Load(),
		Status429:      c[fault429].Load(),
		Status500:      c[fault500].Load(),
		Status503:      c[fault503].Load(),
		Hang:           c[faultHang].Load(),
		Disconnect:     c[faultDisconnect].Load(),
		StreamError:    c[faultStreamError].Load(),
		SlowFirstByte:  c[faultSlowFirstByte].Load(),
		OutageRefuse:   c[faultOutageRefuse].Load(),
		Outage503:      c[faultOutage503].Load(),
		OutageRejected: c[faultOutageRejected].Load(),
		OutageCut:      c[faultOutageCut].Load(),
		Unauthorized:   c[faultUnauthorized].Load(),
		ModelNotFound:  c[faultModelNotFound].Load(),
	}
}

// injector draws the faults of each request. It counts the requests it
// has seen per prompt, so that attempt n of a prompt draws from (seed,
// prompt, n): a rerun sending the same prompts gets the same faults and
// a retry draws afresh. A prompt here is the request's key
// (Config.requestKey): its messages and sampling fields, so two samples
// of one conversation sent with different seeds count apart. The count costs one map entry per distinct
// prompt (about 50 bytes, so about 1.3 MB for 25,000 prompts) and is
// kept only when some per-request fault is configured.
type injector struct {
	faults Faults
	on     bool // some per-request fault is configured

	mu       sync.Mutex
	attempts map[uint64]uint64 // requests seen, by prompt hash
}

func newInjector(cfg Config) *injector {
	in := &injector{faults: cfg.Faults, on: cfg.Faults.perRequest()}
	if in.on {
		in.attempts = make(map[uint64]uint64)
	}
	return in
}

// plan counts a request with key h (Config.requestKey: its prompt,
// sampling fields and the seed) and draws its faults.
func (in *injector) plan(h uint64) faultPlan {
	if !in.on {
		return faultPlan{}
	}
	in.mu.Lock()
	n := in.attempts[h]
	in.attempts[h] = n + 1
	in.mu.Unlock()
	return in.faults.decide(h, n)
}
