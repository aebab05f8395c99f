package engine_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/engine"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// sim serves the simulator speaking as cfg.Engine and returns a client
// for it.
func sim(t *testing.T, cfg simulator.Config) *openai.Client {
	t.Helper()
	c, err := openai.New(openai.Config{BaseURL: simtest.Serve(t, cfg)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestDetectEachDialect(t *testing.T) {
	for _, name := range simulator.Engines() {
		t.Run(name, func(t *testing.T) {
			c := sim(t, simulator.Config{Engine: name})
			f, err := engine.Detect(ctx(t), c, "auto")
			if err != nil {
				t.Fatal(err)
			}
			if string(f.Name) != name || !strings.Contains(f.By, "owned_by") {
				t.Fatalf("found %s by %s, want %s by owned_by", f.Name, f.By, name)
			}
			if f.MetricsOn == nil || !*f.MetricsOn {
				t.Errorf("%s: load metrics not found at %s", name, f.Load.Path)
			}
		})
	}
}

func TestDetectReadsSGLangSettings(t *testing.T) {
	c := sim(t, simulator.Config{Engine: simulator.EngineSGLang, NoMetrics: true})
	f, err := engine.Detect(ctx(t), c, "")
	if err != nil {
		t.Fatal(err)
	}
	if f.PriorityOn == nil || *f.PriorityOn || f.MetricsOn == nil || *f.MetricsOn {
		t.Fatalf("priority on %v, metrics on %v: want both read as off", f.PriorityOn, f.MetricsOn)
	}
	plan := f.Plan(engine.Wants{Priority: 10, AutoWindow: true})
	var refused, unsure []string
	for _, l := range plan {
		switch l.Verdict {
		case engine.Refused:
			refused = append(refused, l.Feature)
		case engine.Unsure:
			unsure = append(unsure, l.Feature)
		}
	}
	if strings.Join(refused, ",") != "priority" || strings.Join(unsure, ",") != "load metrics" {
		t.Fatalf("refused %v, unsure %v; want priority refused (--enable-priority-scheduling), load metrics unsure", refused, unsure)
	}
}

// A server that shows nothing of its engine (a proxy, say) is an error
// that says to give --engine; given, the engine is taken as named.
func TestUnknownServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m","owned_by":"litellm"}]}`))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := openai.New(openai.Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Await(ctx(t), c, "auto", nil); err == nil || !strings.Contains(err.Error(), "give --engine") {
		t.Fatalf("err %v, want one that says to give --engine", err)
	}
	f, err := engine.Detect(ctx(t), c, "SGLang")
	if err != nil || f.Name != engine.SGLang || f.By != "--engine sglang" {
		t.Fatalf("given: %+v, %v", f, err)
	}
	if _, err := engine.Await(ctx(t), c, "tgi", nil); err == nil || !strings.Contains(err.Error(), "unknown engine") {
		t.Fatalf("an unknown name: %v", err)
	}
}

func TestPlan(t *testing.T) {
	on := true
	for _, tc := range []struct {
		engine  engine.Name
		want    engine.Wants
		verdict map[string]engine.Verdict
	}{
		{engine.VLLM, engine.Wants{TokenIDs: true, Priority: 10, Samples: 4},
			map[string]engine.Verdict{"token ids": engine.Works, "priority": engine.Works, "samples": engine.Works}},
		{engine.SGLang, engine.Wants{TokenIDs: true, Samples: 4},
			map[string]engine.Verdict{"token ids": engine.Adapted, "samples": engine.Works}},
		{engine.TRTLLM, engine.Wants{TokenIDs: true, Priority: 10},
			map[string]engine.Verdict{"token ids": engine.Refused, "priority": engine.Unsure}},
		{engine.LlamaCpp, engine.Wants{Priority: 10, Samples: 4},
			map[string]engine.Verdict{"priority": engine.Refused, "samples": engine.Adapted}},
		{engine.VLLM, engine.Wants{Extraction: true}, map[string]engine.Verdict{"hidden states": engine.Works}},
		{engine.SGLang, engine.Wants{Extraction: true}, map[string]engine.Verdict{"hidden states": engine.Refused}},
	} {
		p, err := engine.Lookup(string(tc.engine))
		if err != nil {
			t.Fatal(err)
		}
		f := engine.Found{Profile: p, MetricsOn: &on}
		got := map[string]engine.Verdict{}
		for _, l := range f.Plan(tc.want) {
			got[l.Feature] = l.Verdict
			if l.Verdict == engine.Refused && l.Fix == "" {
				t.Errorf("%s: %s refused without a fix", tc.engine, l.Feature)
			}
		}
		for feature, v := range tc.verdict {
			if got[feature] != v {
				t.Errorf("%s %s: %v, want %v", tc.engine, feature, got[feature], v)
			}
		}
	}
}

func TestRefuser(t *testing.T) {
	trt, _ := engine.Lookup(string(engine.TRTLLM))
	refuse := engine.Found{Profile: trt, By: "--engine trtllm"}.Refuser(0, nil)
	if err := refuse(&schema.Manifest{Run: "ids", ReturnTokenIDs: true}); err == nil || !strings.Contains(err.Error(), "no token ids") {
		t.Errorf("token ids on TensorRT-LLM: %v", err)
	}
	if err := refuse(&schema.Manifest{Run: "plain", Samples: 4}); err != nil {
		t.Errorf("a plain run refused: %v", err)
	}
	var logged bytes.Buffer
	sg, _ := engine.Lookup(string(engine.SGLang))
	refuse = engine.Found{Profile: sg}.Refuser(10, slog.New(slog.NewTextHandler(&logged, nil)))
	for range 2 {
		if err := refuse(&schema.Manifest{Run: "ids", ReturnTokenIDs: true}); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logged.String(), "unstreamed"); n != 1 {
		t.Errorf("the unstreamed token ids logged %d times, want once:\n%s", n, logged.String())
	}
}

// SGLang started with --schedule-low-priority-values-first orders
// priorities vLLM's way: aerie reads it from /get_server_info and sends
// the batch's priority as it is.
func TestSGLangLowValuesFirst(t *testing.T) {
	c := sim(t, simulator.Config{Engine: simulator.EngineSGLang, SchedulingPolicy: simulator.SchedulingPriority, LowPriorityFirst: true})
	f, err := engine.Detect(ctx(t), c, "auto")
	if err != nil {
		t.Fatal(err)
	}
	if f.PriorityOn == nil || !*f.PriorityOn || f.Dialect.Priority.HigherFirst {
		t.Fatalf("priority on %v, higher first %v: want on, lower first", f.PriorityOn, f.Dialect.Priority.HigherFirst)
	}
	if got := string(f.Dialect.Priority.Encode(10)); got != "10" {
		t.Fatalf("batch priority sent as %s, want 10", got)
	}
}
