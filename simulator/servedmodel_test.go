package simulator

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestModelRename renames the served model as a vLLM restarted with
// another --served-model-name: the old name gets vLLM's 404, the new one
// (or none) is answered under the new name, and /v1/models and the
// metrics follow.
func TestModelRename(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Config{Speed: 100, OutputMedian: 8, Model: "org/old"})
	ts.complete(t, map[string]any{"model": "org/old", "messages": userMessages("before")})

	rep, _ := adminCall(t, http.MethodPost, ts.url+"/admin/model?name=org/new", http.StatusOK)
	if rep.Model != "org/new" {
		t.Errorf("report model %q, want org/new", rep.Model)
	}
	status, body := rawAnswer(t, ts, map[string]any{"model": "org/old", "messages": userMessages("after")})
	if want := wantModelNotFound("org/old"); status != http.StatusNotFound || body != want {
		t.Errorf("old name: status %d body\n%s\nwant 404 and\n%s", status, body, want)
	}
	for _, model := range []string{"org/new", ""} {
		d := ts.complete(t, map[string]any{"model": model, "messages": userMessages("after")})
		if d.Model != "org/new" {
			t.Errorf("model %q: answered as %q, want org/new", model, d.Model)
		}
	}
	chunks := ts.stream(t, map[string]any{"model": "org/new", "messages": userMessages("streamed")})
	if chunks[0].Model != "org/new" {
		t.Errorf("stream answered as %q, want org/new", chunks[0].Model)
	}

	status, body = call(t, http.MethodGet, ts.url+"/v1/models", "", nil)
	var models modelList
	if err := json.Unmarshal([]byte(body), &models); err != nil || status != http.StatusOK {
		t.Fatalf("GET /v1/models: %d %s %v", status, body, err)
	}
	if len(models.Data) != 1 || models.Data[0].ID != "org/new" || models.Data[0].Root != "org/new" {
		t.Errorf("models after the rename: %+v", models.Data)
	}
	if v := ts.scrape(t, `vllm:request_success_total{engine="0",finished_reason="stop",model_name="org/new"}`); v != 4 {
		t.Errorf("request_success_total under the new name = %v, want 4 (the name at scrape time)", v)
	}
	if got := ts.Config().Model; got != "org/new" {
		t.Errorf("Config().Model = %q, want org/new", got)
	}
	if n := ts.Stats().Faults.ModelNotFound; n != 1 {
		t.Errorf("Stats().Faults.ModelNotFound = %d, want 1", n)
	}

	_, raw := adminCall(t, http.MethodPost, ts.url+"/admin/model?name=", http.StatusBadRequest)
	if want := `"param":"name"`; !json.Valid([]byte(raw)) || !strings.Contains(raw, want) {
		t.Errorf("POST /admin/model without a name: %s, want a 400 with %s", raw, want)
	}
}
