package probe_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/probe"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// The probe sends about rate x duration requests, waits for them, and
// reports their times to first token in order.
func TestProbeMeasuresTimeToFirstToken(t *testing.T) {
	url := simtest.Serve(t, simulator.Config{Speed: 100, OutputMedian: 20, OutputSigma: 0.1})
	client, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	rep, err := probe.Run(context.Background(), client, probe.Config{Rate: 40, Duration: 2 * time.Second, Model: simulator.DefaultModel, Seed: 3,
		OnAnswer: func(time.Duration, error) { seen.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent < 40 || rep.Sent > 130 || rep.Answered != rep.Sent || rep.Failed != 0 || seen.Load() != int64(rep.Sent) {
		t.Errorf("report %+v (%d seen); want about 80 sent and every one answered", rep, seen.Load())
	}
	if !(0 < rep.P50 && rep.P50 <= rep.P95 && rep.P95 <= rep.P99 && rep.P99 <= rep.Max) {
		t.Errorf("percentiles out of order: %+v", rep)
	}
	if s := rep.String(); !strings.Contains(s, "answered") || !strings.Contains(s, "p95") {
		t.Errorf("report line %q", s)
	}
}

// A probe whose every request fails says so with the first error; bad
// settings are refused.
func TestProbeFailures(t *testing.T) {
	url := simtest.Serve(t, simulator.Config{Speed: 100})
	client, err := openai.New(openai.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := probe.Run(context.Background(), client, probe.Config{Rate: 50, Duration: 200 * time.Millisecond, Model: "not-served"})
	var apiErr *openai.APIError
	if err == nil || !errors.As(err, &apiErr) || apiErr.Status != 404 || rep.Answered != 0 || rep.Failed == 0 {
		t.Errorf("probe of a model not served: %+v, %v", rep, err)
	}
	if _, err := probe.Run(context.Background(), client, probe.Config{Duration: time.Second}); err == nil {
		t.Error("a probe without a rate ran")
	}
}
