package worker

import (
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	for attempt := 1; attempt <= 12; attempt++ {
		nominal := min(time.Second<<(attempt-1), time.Minute)
		for range 50 {
			d := retryDelay(attempt, time.Second, time.Minute)
			if d < nominal/2 || d >= nominal*3/2 {
				t.Fatalf("attempt %d: delay %v outside [%v, %v)", attempt, d, nominal/2, nominal*3/2)
			}
		}
	}
}
