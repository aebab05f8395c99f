package status_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/status"
)

func fixedRun() *status.Run {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	return &status.Run{
		Run: "kimi", Model: "moonshotai/Kimi-K2.5", Total: 25000, Phase: schema.PhaseSteady,
		Completed: 12345, Failed: 12, FailedByReason: map[string]int{schema.ReasonPermanent: 10, schema.ReasonExhausted: 2},
		Truncated: 3, InFlight: 400, LiveWorkers: 2, HintedAnswers: 12000, HintRankCorrelation: 0.712,
		RequestsPerSec: 1.42, TokensPerSec: 612.4, RequestsPerSecOverall: 1.38, TokensPerSecOverall: 590,
		ETASec: 72 * 60, ETALowSec: 58 * 60, ETAHighSec: 91 * 60, ElapsedSec: 2*3600 + 30*60,
		Event:      &status.Age{At: at, AgeSec: 1.2},
		Queue:      status.Queue{Pending: 12243, AckPending: 412, Redelivered: 5, ResultsToWrite: 7},
		Aggregator: &status.Aggregator{Host: "cpu-1", PID: 4121, Dir: "/data/kimi"},
		Workers: []status.Worker{
			{Name: "gpu-a-1", Host: "gpu-a", Backend: "http://127.0.0.1:8000", Window: 200, InFlight: 200,
				TokensPerSec: 310.4, Heartbeat: status.Age{At: at, AgeSec: 1}},
			{Name: "gpu-b-1", Host: "gpu-b", Backend: "http://127.0.0.1:8000", Window: 200, InFlight: 0,
				TokensPerSec: -1, Paused: "backend down: 503", Heartbeat: status.Age{At: at, AgeSec: 2}},
			{Name: "gpu-c-1", Host: "gpu-c", Window: 200, TokensPerSec: -1,
				Heartbeat: status.Age{At: at, AgeSec: 45, Stale: true}},
			{Name: "gpu-d-1", Host: "gpu-d", Window: 400, TokensPerSec: 900, Hedges: 7, HedgesWon: 5,
				Heartbeat: status.Age{At: at, AgeSec: 1}},
		},
	}
}

func TestWriteRunShowsEveryFigure(t *testing.T) {
	var b bytes.Buffer
	if err := status.WriteRun(&b, fixedRun()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"kimi", "moonshotai/Kimi-K2.5", "phase steady", "last event 1s ago",
		"12,345 / 25,000 (49.4%)",
		"12 (permanent 10, retries-exhausted 2)",
		"400 on 2 live workers", "queued 12,243", "redelivered 5",
		"1.42 req/s", "612 tok/s", "overall 1.38 req/s, 590 tok/s",
		"ETA         1h12m (58m–1h31m)", "elapsed 2h30m",
		"cpu-1 pid 4121 writing /data/kimi", "7 results",
		"WORKER", "HOST", "BACKEND",
		"length hints: rank correlation 0.71 with the tokens taken, over 12,000 answers with a hint",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(out, "\n")
	workerLine := func(name string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, name+" ") {
				return l
			}
		}
		t.Fatalf("no line for worker %s:\n%s", name, out)
		return ""
	}
	if l := workerLine("gpu-a-1"); !strings.Contains(l, "gpu-a") || !strings.Contains(l, "http://127.0.0.1:8000") ||
		!strings.Contains(l, "310") || !strings.Contains(l, "1s ago") || !strings.HasSuffix(strings.TrimSpace(l), "ok") {
		t.Errorf("worker line %q", l)
	}
	if l := workerLine("gpu-b-1"); !strings.Contains(l, "paused: backend down: 503") {
		t.Errorf("paused worker line %q does not say why", l)
	}
	if l := workerLine("gpu-c-1"); !strings.Contains(l, "STALE") || !strings.Contains(l, "45s ago") {
		t.Errorf("stale worker line %q is not marked stale", l)
	}
	if l := workerLine("gpu-d-1"); !strings.HasSuffix(strings.TrimSpace(l), "ok, hedged 7 (won 5)") {
		t.Errorf("hedging worker line %q does not count its hedges", l)
	}
}

func TestWriteRunSaysWhatIsMissing(t *testing.T) {
	st := &status.Run{Run: "fresh", Total: 10, ETASec: -1, ETALowSec: -1, ETAHighSec: -1, Workers: []status.Worker{}}
	var b bytes.Buffer
	if err := status.WriteRun(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"phase unknown", "no throughput event", "ETA         unknown", "NONE RUNNING", "aerie aggregate --run fresh", "no worker heartbeat", "aerie work --run fresh"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	st.Event = &status.Age{AgeSec: 120, Stale: true}
	b.Reset()
	if err := status.WriteRun(&b, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "STALE, is the aggregator running?") {
		t.Errorf("a stale event is not called stale:\n%s", b.String())
	}
}

func TestWriteList(t *testing.T) {
	lines := []status.Line{
		{Run: "a", Total: 2000, Phase: schema.PhaseDone, Completed: 1990, Failed: 10, ETASec: 0, ETALowSec: 0, ETAHighSec: 0, Event: &status.Age{AgeSec: 5}},
		{Run: "b", Total: 25000, Phase: schema.PhaseSteady, Completed: 400, ETASec: 4320, ETALowSec: 3480, ETAHighSec: 5460, Event: &status.Age{AgeSec: 1}},
		{Run: "c", Total: 100, ETASec: -1, ETALowSec: -1, ETAHighSec: -1},
		{Run: "d", Problem: "manifest cannot be read: bad"},
	}
	var b bytes.Buffer
	if err := status.WriteList(&b, lines); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"RUN", "PHASE", "COMPLETED", "FAILED", "ETA", "LAST EVENT",
		"1,990/2,000", "done", "5s ago",
		"400/25,000", "1h12m (58m–1h31m)", "1s ago",
		"unknown", "none", "manifest cannot be read",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := status.WriteList(&b, nil); err != nil || !strings.Contains(b.String(), "no run") {
		t.Errorf("empty list: %v %q", err, b.String())
	}
}

func TestFormatETA(t *testing.T) {
	for _, tt := range []struct {
		eta, low, high float64
		phase          schema.Phase
		want           string
	}{
		{4320, 3480, 5460, schema.PhaseSteady, "1h12m (58m–1h31m)"},
		{-1, -1, -1, schema.PhaseRampUp, "unknown"},
		{0, 0, 0, schema.PhaseDone, "done"},
		{25, 0, 0, schema.PhaseSteady, "25s"},       // no band (an older aggregator): none shown
		{90, 90, 90, schema.PhaseDraining, "1m30s"}, // a band of one point says nothing more
		{45, 40, 52, schema.PhaseDraining, "45s (40s–52s)"},
	} {
		if got := status.FormatETA(tt.eta, tt.low, tt.high, tt.phase); got != tt.want {
			t.Errorf("FormatETA(%v, %v, %v, %s) = %q, want %q", tt.eta, tt.low, tt.high, tt.phase, got, tt.want)
		}
	}
}

func TestDuration(t *testing.T) {
	for sec, want := range map[float64]string{
		0: "0s", 44.6: "45s", 185: "3m05s", 12 * 60: "12m", 72 * 60: "1h12m", 3*86400 + 4*3600: "3d4h", -3: "0s",
	} {
		if got := status.Duration(sec); got != want {
			t.Errorf("Duration(%v) = %q, want %q", sec, got, want)
		}
	}
}

// Lines that nothing will bring are named, and nothing is said of them
// when there are none.
func TestWriteRunSaysWhatWillNeverCome(t *testing.T) {
	st := &status.Run{Run: "moved", Total: 500, ETASec: -1, ETALowSec: -1, ETAHighSec: -1, Workers: []status.Worker{}}
	var b bytes.Buffer
	if err := status.WriteRun(&b, st); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "UNWRITTEN") {
		t.Errorf("status names unwritten lines when there are none:\n%s", b.String())
	}
	st.Unwritten = 500
	b.Reset()
	if err := status.WriteRun(&b, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "UNWRITTEN   500 lines will never come") {
		t.Errorf("status does not name the unwritten lines:\n%s", b.String())
	}
}

// A worker that holds back says so, and why, in its state.
func TestWriteRunShowsHolds(t *testing.T) {
	st := fixedRun()
	st.Workers[0].Holding = status.HoldingHints
	var b bytes.Buffer
	if err := status.WriteRun(&b, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "holding back: "+status.HoldingHints) {
		t.Errorf("the holding worker's line does not say so:\n%s", b.String())
	}
}

// A run that needs features shows them; a worker and an aggregator that
// lack one are named, with the version to upgrade to.
func TestWriteRunNamesWhatLacksTheRunsFeatures(t *testing.T) {
	st := fixedRun()
	st.Needs, st.WrittenBy = []string{schema.FeatureSamples, "warp-drive"}, "v2.0.0"
	st.AggregatorVersion, st.AggregatorLacks, st.AggregatorLacksWrittenBy = "v1.9.0", []string{"warp-drive"}, "v2.0.0"
	st.Workers[0].Version = "v2.0.0"
	st.Workers[1].Version, st.Workers[1].Lacks, st.Workers[1].LacksWrittenBy = "v1.9.0", []string{"warp-drive"}, "v2.0.0"
	st.Workers[1].Paused = "skipped: run kimi needs feature warp-drive, which aerie v2.0.0 has and this aerie (v1.9.0) lacks: upgrade aerie on this host"
	var b bytes.Buffer
	if err := status.WriteRun(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"needs       samples, warp-drive  (produced by aerie v2.0.0)",
		"AGGREGATOR  LACKS warp-drive: aerie v1.9.0 writes nothing of the run; upgrade it to aerie v2.0.0 or later",
		"UPGRADE     1 worker lacks warp-drive and takes none of the run: gpu-b-1 (aerie v1.9.0); upgrade to aerie v2.0.0 or later",
		"VERSION", "v2.0.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// An ETA that waits on the run's longest answers says so: which answer,
// how far it has got and for how long, or that they are still to come.
func TestWriteRunNamesTheStraggler(t *testing.T) {
	cases := []struct {
		s    *schema.Stragglers
		want string
	}{
		{&schema.Stragglers{InFlight: 1, LongestTokens: 11900, LongestSec: 120}, "waiting on 1 answer at 11,900 tokens, running 2m00s"},
		{&schema.Stragglers{InFlight: 3, LongestTokens: 4000, LongestSec: 75}, "waiting on 3 answers, the longest at 4,000 tokens, running 1m15s"},
		{&schema.Stragglers{InFlight: 2, LongestTokens: 900}, "waiting on 2 answers, the longest at 900 tokens"},
		{&schema.Stragglers{}, "(set by the longest answers still to come)"},
	}
	for _, c := range cases {
		st := fixedRun()
		st.Phase, st.Stragglers = schema.PhaseDraining, c.s
		var b bytes.Buffer
		if err := status.WriteRun(&b, st); err != nil {
			t.Fatal(err)
		}
		line := ""
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "ETA") {
				line = l
			}
		}
		if !strings.HasSuffix(line, c.want) {
			t.Errorf("%+v: ETA line %q, want it to end in %q", *c.s, line, c.want)
		}
	}
	st := fixedRun()
	var b bytes.Buffer
	if err := status.WriteRun(&b, st); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "waiting on") || strings.Contains(b.String(), "still to come") {
		t.Errorf("status names stragglers the event did not:\n%s", b.String())
	}
}
