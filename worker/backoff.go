package worker

import (
	"math/rand/v2"
	"time"
)

// retryDelay is how long a prompt that failed transiently on its
// attempt-th delivery waits before the next: base x 2^(attempt-1) capped at
// max, then scaled by a random factor in [0.5, 1.5).
func retryDelay(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return time.Duration(float64(d) * (0.5 + rand.Float64()))
}
