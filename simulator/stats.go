package simulator

// Stats is a snapshot of the engine, the same figures /metrics reports.
type Stats struct {
	// Running counts admitted sequences, prefilling or decoding; at most
	// MaxNumSeqs. A request is admitted in the step that starts reading
	// its prompt.
	Running int
	// Waiting counts requests queued for a slot or KV room, preempted
	// ones included.
	Waiting int
	// GenerationTokens counts every token generated so far, including
	// those of requests later canceled; a preempted request's tokens
	// are counted once.
	GenerationTokens int64
	// PromptTokens counts prompt tokens of every prefill completed, once
	// per request: the recompute after a preemption is not counted.
	PromptTokens int64
	// PrefixQueries counts the prompt tokens looked up in the prefix
	// cache, and PrefixHits those found there, which were not read
	// again: prompt tokens actually prefilled are PrefixQueries less
	// PrefixHits (see Config.PrefixCache).
	PrefixQueries, PrefixHits int64
	// Completed counts requests that finished (stop or length).
	Completed int64
	// Aborted counts requests whose client went away before the end.
	Aborted int64
	// Preemptions counts running sequences preempted for lack of KV
	// cache, each time it happened.
	Preemptions int64
	// KVCacheUsage is the fraction of the KV cache's blocks (of 16
	// tokens) held by running sequences, from 0 to 1.
	KVCacheUsage float64
	// Faults counts the faults injected so far.
	Faults FaultCounts
}

// ttftSnapshot reads the time-to-first-token histogram: the count, the
// sum in simulated seconds and the cumulative count of each bucket.
func (e *engine) ttftSnapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ttft.count, e.ttft.sum, e.ttft.cumulative()
}

// snapshot reads the engine's figures under its lock.
func (e *engine) snapshot() (Stats, map[string]int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	byReason := make(map[string]int64, len(e.finished))
	var completed int64
	for r, n := range e.finished {
		byReason[r] = n
		completed += n
	}
	return Stats{
		Running:          e.order.Len(),
		Waiting:          e.waiting.Len(),
		GenerationTokens: e.generated,
		PromptTokens:     e.promptTotal,
		PrefixQueries:    e.prefixes.queries,
		PrefixHits:       e.prefixes.hits,
		Completed:        completed,
		Aborted:          e.aborted,
		Preemptions:      e.preemptionTotal,
		KVCacheUsage:     float64(e.kvBlocks) / float64(e.kvCap),
	}, byReason
}

// FaultCounts counts what the server injected (see Faults), so a test
// can compare what its client saw with what was done to it.
type FaultCounts struct {
	// Status400, Status429, Status500 and Status503 count requests
	// answered at once with that injected status.
	Status400, Status429, Status500, Status503 int64
	// Hang counts requests left unanswered.
	Hang int64
	// Disconnect counts answers cut part way (counted when cut, so a
	// client that left first is not counted).
	Disconnect int64
	// StreamError counts answers ended by an engine error part way
	// (counted when the error is sent, so not for a client that left
	// first).
	StreamError int64
	// SlowFirstByte counts requests whose first byte was delayed.
	SlowFirstByte int64
	// OutageRefuse and Outage503 count outages begun, by mode.
	OutageRefuse, Outage503 int64
	// OutageRejected counts requests that arrived during an outage:
	// answered 503, or closed unanswered in a refuse outage (only with
	// Handler alone, or on a connection made just before the listener
	// closed; refused connections never reach the server).
	OutageRejected int64
	// OutageCut counts requests in flight when an outage began.
	OutageCut int64
	// Unauthorized counts requests under /v1 refused with 401 for a
	// missing or wrong API key (see Config.APIKey and /admin/api-key).
	Unauthorized int64
	// ModelNotFound counts chat requests refused with 404 for naming a
	// model other than the one served (see /admin/model).
	ModelNotFound int64
}
