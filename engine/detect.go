package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/openai"
)

// Found is an engine as Detect found it: its profile, adjusted to the
// settings the server shows, and how it was told.
type Found struct {
	Profile
	// By says what showed the engine, e.g. `owned_by "sglang" in
	// /v1/models`, or "--engine sglang" when it was given.
	By string
	// PriorityOn and MetricsOn say whether the server orders its queue by
	// priority and serves its load metrics, as far as Detect could see:
	// nil when it could not tell.
	PriorityOn, MetricsOn *bool
}

// serverInfo is the part of SGLang's GET /get_server_info (its server
// arguments) that changes what aerie does.
type serverInfo struct {
	EnablePriorityScheduling       *bool   `json:"enable_priority_scheduling"`
	ScheduleLowPriorityValuesFirst *bool   `json:"schedule_low_priority_values_first"`
	EnableMetrics                  *bool   `json:"enable_metrics"`
	ReasoningParser                *string `json:"reasoning_parser"`
}

// Detect tells which engine serves c from what the server shows of
// itself, in this order: the owned_by of its /v1/models cards (each
// engine writes its own name there), then the prefix of its metric
// names, then SGLang's /get_server_info. name, when not "" or "auto",
// is taken as given (--engine) and only the settings are read. A server
// that shows none of them is an error that says to give --engine.
func Detect(ctx context.Context, c *openai.Client, name string) (Found, error) {
	var f Found
	if name != "" && name != "auto" {
		p, err := Lookup(name)
		if err != nil {
			return Found{}, err
		}
		f = Found{Profile: p, By: "--engine " + string(p.Name)}
	} else {
		var err error
		if f, err = identify(ctx, c); err != nil {
			return Found{}, err
		}
	}
	f.readSettings(ctx, c)
	return f, nil
}

// identify finds the engine behind c.
func identify(ctx context.Context, c *openai.Client) (Found, error) {
	models, err := c.Models(ctx)
	if err != nil {
		return Found{}, fmt.Errorf("tell the engine: %w", err)
	}
	for _, m := range models {
		for _, p := range profiles {
			if m.OwnedBy == p.OwnedBy {
				return Found{Profile: p, By: fmt.Sprintf("owned_by %q in /v1/models", m.OwnedBy)}, nil
			}
		}
	}
	for _, path := range []string{"/metrics", "/prometheus/metrics"} {
		text, _, err := c.ServerPage(ctx, path)
		if err != nil {
			continue
		}
		for _, p := range profiles {
			if hasSeries(text, p.MetricPrefix) {
				return Found{Profile: p, By: fmt.Sprintf("%s* metrics at %s", p.MetricPrefix, path)}, nil
			}
		}
	}
	if _, _, err := c.ServerPage(ctx, "/get_server_info"); err == nil {
		p, _ := Lookup(string(SGLang))
		return Found{Profile: p, By: "/get_server_info answers"}, nil
	}
	owners := make([]string, 0, len(models))
	for _, m := range models {
		owners = append(owners, fmt.Sprintf("%q", m.OwnedBy))
	}
	return Found{}, fmt.Errorf("%w: cannot tell which engine serves %s: /v1/models says owned_by %s, and no engine's metrics or /get_server_info answer; give --engine (%s)",
		errUnknown, c.BaseURL(), strings.Join(owners, ", "), strings.Join(Names(), ", "))
}

// readSettings reads what the server shows of the settings that change
// aerie's behaviour: SGLang's server arguments, and whether the load
// metrics are served.
func (f *Found) readSettings(ctx context.Context, c *openai.Client) {
	if f.Name == SGLang {
		f.readSGLang(ctx, c)
	}
	text, _, err := c.ServerPage(ctx, f.Load.Path)
	var apiErr *openai.APIError
	switch {
	case err == nil:
		on := hasSeries(text, f.Load.Running...) && hasSeries(text, f.Load.Waiting...)
		f.MetricsOn = &on
	case errors.As(err, &apiErr) && (apiErr.Status == http.StatusNotFound || apiErr.Status == http.StatusNotImplemented):
		off := false
		f.MetricsOn = &off
	}
}

// readSGLang reads SGLang's server arguments: whether priority
// scheduling is on and which way it runs.
func (f *Found) readSGLang(ctx context.Context, c *openai.Client) {
	body, _, err := c.ServerPage(ctx, "/get_server_info")
	if err != nil {
		return
	}
	var info serverInfo
	if json.Unmarshal(body, &info) != nil {
		return
	}
	f.PriorityOn = info.EnablePriorityScheduling
	if low := info.ScheduleLowPriorityValuesFirst; low != nil && *low {
		f.Dialect.Priority.HigherFirst = false
		f.Priority.Describe = "integer priority, lower first (--schedule-low-priority-values-first)"
	}
}

// hasSeries reports whether a Prometheus text page has a series whose
// name is, or begins with, one of names.
func hasSeries(text []byte, names ...string) bool {
	for line := range bytes.Lines(text) {
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		for _, n := range names {
			if n != "" && bytes.HasPrefix(line, []byte(n)) {
				return true
			}
		}
	}
	return false
}

// errUnknown marks Detect's answer from a server that answered but
// showed no engine: waiting will not change it.
var errUnknown = errors.New("engine unknown")

// Await is Detect for a server that may still be starting: while the
// server does not answer, or answers as one that is loading (503), it
// tries again with a back-off up to 10 s, calling waiting (which may be
// nil) about every 30 s with the last error, until ctx ends. A server
// that answers and shows no engine it knows is an error at once.
func Await(ctx context.Context, c *openai.Client, name string, waiting func(error)) (Found, error) {
	if name != "" && name != "auto" {
		if _, err := Lookup(name); err != nil {
			return Found{}, err
		}
	}
	backoff, told := time.Second, time.Now()
	for {
		f, err := Detect(ctx, c, name)
		if err == nil || errors.Is(err, errUnknown) || openai.Classify(err) != openai.Transient {
			return f, err
		}
		if waiting != nil && time.Since(told) >= 30*time.Second {
			waiting(err)
			told = time.Now()
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return Found{}, fmt.Errorf("%w (while waiting for the server: %w)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}
