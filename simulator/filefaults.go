package simulator

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// FileFaults are the faults of hidden-state extraction (see
// Config.HiddenStatesPath): what the file of a reply that answered 200
// may be. Each is the share of extraction requests that get it; a
// request gets at most one, drawn like the request faults from the
// prompt and its attempt, so a retry draws afresh. The zero value
// injects none.
type FileFaults struct {
	// Missing: the lock is let go and no file is ever written.
	Missing float64
	// Cut: the file stops part way (10 to 90% of its bytes), as one whose
	// writer crashed.
	Cut float64
	// NaN: one hidden-state value is a NaN.
	NaN float64
	// OtherTokens: one token id in the file is not the prompt's.
	OtherTokens float64
	// SlowLock: the lock is held for SlowLockFor (simulated time) after
	// the reply before the file is written: a reader that gives up first
	// has no file. SlowLockFor 0 means one minute.
	SlowLock    float64
	SlowLockFor time.Duration
}

// fileFault is one kind of FileFaults.
type fileFault int

const (
	fileOK fileFault = iota
	fileMissing
	fileCut
	fileNaN
	fileOtherTokens
	fileSlowLock
)

func (f FileFaults) rates() []float64 {
	return []float64{fileMissing: f.Missing, fileCut: f.Cut, fileNaN: f.NaN, fileOtherTokens: f.OtherTokens, fileSlowLock: f.SlowLock}
}

func (f FileFaults) validate() []error {
	var errs []error
	sum := 0.0
	for k, r := range f.rates()[1:] {
		if !(r >= 0 && r <= 1) {
			errs = append(errs, fmt.Errorf("simulator: file fault %d rate must be in [0, 1], got %v", k+1, r))
		}
		sum += r
	}
	if sum > 1+1e-9 {
		errs = append(errs, fmt.Errorf("simulator: file fault rates (missing, cut, NaN, other tokens, slow lock) add up to %v; each file gets at most one, so the sum must be <= 1", sum))
	}
	if f.SlowLockFor < 0 {
		errs = append(errs, fmt.Errorf("simulator: slow lock duration must not be negative, got %v", f.SlowLockFor))
	}
	return errs
}

// fileFaulter draws the file fault of each extraction request, counting
// attempts per prompt as the injector does.
type fileFaulter struct {
	faults FileFaults
	mu     sync.Mutex
	seen   map[uint64]uint64
	// injected counts the faults drawn, by kind.
	injected [fileSlowLock + 1]atomic.Int64
}

// fileFaultLabels name the file faults in the admin report.
var fileFaultLabels = [...]string{fileMissing: "hs_missing", fileCut: "hs_cut", fileNaN: "hs_nan", fileOtherTokens: "hs_other_tokens", fileSlowLock: "hs_slow_lock"}

// draw counts a request of prompt hash h and returns its fault and a
// uniform draw for where it strikes.
func (f *fileFaulter) draw(h uint64) (fileFault, float64) {
	f.mu.Lock()
	if f.seen == nil {
		f.seen = make(map[uint64]uint64)
	}
	n := f.seen[h]
	f.seen[h] = n + 1
	f.mu.Unlock()
	x := mix64(h ^ mix64(n^0x5f3759df))
	u, edge := unitFrom(x), 0.0
	for k, r := range f.faults.rates() {
		edge += r
		if k > 0 && u < edge {
			f.injected[k].Add(1)
			return fileFault(k), unitFrom(mix64(x ^ 0x2545F4914F6CDD1D))
		}
	}
	return fileOK, 0
}
