package worker

import (
	"os"

	"github.com/aerie-dev/aerie/worker/internal/policy"
	"github.com/aerie-dev/aerie/worker/internal/policy/policytest"
)

// With AERIE_RECORD_DECISIONS naming a file, every decision the workers
// of this package's tests and benchmarks make is added to it, each
// worker's sequence named AERIE_RECORD_LABEL and a number. The golden
// decisions (worker/internal/policy/testdata/decisions.jsonl.gz) are one
// run of BenchmarkTwoBackendsMakespan and one of BenchmarkLongestFirst;
// after a change of policy that changes them on purpose they are recorded
// again, from the repository's root:
//
//	rm -f /tmp/decisions.jsonl
//	AERIE_RECORD_DECISIONS=/tmp/decisions.jsonl AERIE_RECORD_LABEL=makespan- \
//	    go test -run '^$' -bench '^BenchmarkTwoBackendsMakespan$' -benchtime 1x ./worker/
//	AERIE_RECORD_DECISIONS=/tmp/decisions.jsonl AERIE_RECORD_LABEL=order- AERIE_MAKESPAN_SPEED=1 \
//	    go test -run '^$' -bench '^BenchmarkLongestFirst$' -benchtime 1x ./worker/
//	gzip -9 < /tmp/decisions.jsonl > worker/internal/policy/testdata/decisions.jsonl.gz
func init() {
	path := os.Getenv("AERIE_RECORD_DECISIONS")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	rec := policytest.NewRecorder(f, os.Getenv("AERIE_RECORD_LABEL"))
	recordDecision = func(c *controller, name string, p policy.Config, s policy.Snapshot, in policy.Memory) func(policy.Plan, policy.Memory) {
		return rec.Record(c, name, p, s, in)
	}
}
