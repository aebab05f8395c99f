package doctor

import (
	"context"
	"time"

	"github.com/aerie-dev/aerie/openai"
)

// DefaultBackendWait is how long the backend checks wait by default for
// a backend that is starting: a large model takes minutes to load.
const DefaultBackendWait = 15 * time.Minute

// backendLogEvery is how often a wait for the backend says what it waits
// for.
const backendLogEvery = 30 * time.Second

// The back-off between attempts at the backend: from firstBackendBackoff,
// doubling, to maxBackendBackoff.
const (
	firstBackendBackoff = time.Second
	maxBackendBackoff   = 10 * time.Second
)

// untilAnswered runs try, each attempt within per, and tries again with a
// back-off while it fails as a backend does while it starts or sheds load
// (a refused connection, 503 or another 5xx, 429, a cut stream, an attempt
// that timed out), for up to Config.BackendWait from the first attempt,
// logging every backendLogEvery what it waits for. What an answer proves
// wrong (a refused key, an unknown model, a 404) returns at once. It
// returns the last attempt's error.
func (s *session) untilAnswered(ctx context.Context, what string, per time.Duration, try func(context.Context) error) error {
	start := time.Now()
	backoff := firstBackendBackoff
	var logged time.Time
	for {
		actx, cancel := context.WithTimeout(ctx, per)
		err := try(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !waitable(err) {
			return err
		}
		waited := time.Since(start)
		if waited+backoff > s.cfg.BackendWait {
			return err
		}
		if s.cfg.Log != nil && time.Since(logged) >= backendLogEvery {
			s.cfg.Log.Warn("waiting for the backend", "for", what, "err", s.scrub(err.Error()),
				"waited", waited.Round(time.Second), "backend_wait", s.cfg.BackendWait)
			logged = time.Now()
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackendBackoff)
	}
}

// waitable reports whether an attempt's error is one that waiting may
// cure: the backend's transient failures, and an attempt that ran out of
// its own time (the caller's context still alive).
func waitable(err error) bool {
	switch openai.Classify(err) {
	case openai.Transient, openai.Canceled:
		return true
	}
	return false
}
