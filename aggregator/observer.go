package aggregator

import (
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/throughput"
)

// Observer sees what the aggregator sees, for a view of the run such as
// the live page: every throughput event, every worker heartbeat, and
// every line of completions.jsonl (those found at start included) as the
// estimator counts it. Its methods are called from the aggregator's
// loops, so they must be safe for concurrent use and must not block.
type Observer interface {
	Event(schema.Throughput)
	Heartbeat(schema.Heartbeat)
	Answer(throughput.Answer)
}
