package runs_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/runs"
	"github.com/aerie-dev/aerie/schema"
)

// A run's schedule changes in its manifest and nothing else does; two
// changes made at once both hold; a run that does not exist, and a
// weight that is not positive, are refused.
func TestSetSchedule(t *testing.T) {
	ctx := testContext(t)
	_, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: "r", Params: schema.Params{MaxTokens: 9}}, brokertest.Prompts(3))

	five, three := 5, 3.0
	was, now, err := runs.SetSchedule(ctx, js, "r", runs.ScheduleChange{Priority: &five, Weight: &three}, runs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if was != (schema.Schedule{}) || now != (schema.Schedule{Priority: 5, Weight: 3}) {
		t.Fatalf("was %+v now %+v", was, now)
	}
	var wg sync.WaitGroup
	paused, seven := true, 7
	for _, c := range []runs.ScheduleChange{{Paused: &paused}, {Priority: &seven}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := runs.SetSchedule(ctx, js, "r", c, runs.Options{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	list, err := runs.List(ctx, js, runs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Priority != 7 || list[0].Weight != 3 || !list[0].Paused || list[0].Total != 3 {
		t.Fatalf("after two changes at once: %+v", list)
	}
	kv, err := js.KeyValue(ctx, schema.RunsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	m, err := schema.DecodeManifest(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if m.Params.MaxTokens != 9 || m.Model != "test-model" {
		t.Errorf("the rest of the manifest changed: %+v", m)
	}

	if _, _, err := runs.SetSchedule(ctx, js, "nope", runs.ScheduleChange{Priority: &five}, runs.Options{}); err == nil || !strings.Contains(err.Error(), "run nope has no manifest") {
		t.Errorf("unknown run: %v", err)
	}
	zero := 0.0
	if _, _, err := runs.SetSchedule(ctx, js, "r", runs.ScheduleChange{Weight: &zero}, runs.Options{}); err == nil || !strings.Contains(err.Error(), "must be above 0") {
		t.Errorf("weight 0: %v", err)
	}
}
