package pipeline

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"

	"github.com/aerie-dev/aerie/report"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/worker"
)

// writeReport writes the run's report beside its outputs and returns its
// path, or "" when it cannot (said in the log: the run itself is fine).
func writeReport(cfg Config, dir string, be *backend, log *slog.Logger) string {
	backend := backendName(be.url)
	if be.simulated {
		speed := cmp.Or(cfg.Sim.Speed, simulator.DefaultSpeed)
		backend = "built-in simulator at speed " + strconv.FormatFloat(speed, 'g', -1, 64)
	}
	path := report.DefaultPath(cfg.DataDir, cfg.Run)
	_, err := report.WriteFile(path, report.Options{Run: cfg.Run, Dir: dir, Settings: []report.Setting{
		{Name: "backend", Value: backend},
		{Name: "workers (last invocation)", Value: strconv.Itoa(cfg.Workers)},
		{Name: "window per worker", Value: windowText(cfg)},
	}})
	if err != nil {
		log.Warn("cannot write the run's report; aerie report can write it later", "err", err)
		return ""
	}
	return path
}

func windowText(cfg Config) string {
	if w := cfg.Worker; w.AutoWindow {
		return "auto, at most " + strconv.Itoa(cmp.Or(w.MaxWindow, worker.DefaultMaxWindow))
	}
	return strconv.Itoa(cmp.Or(cfg.Worker.Window, worker.DefaultWindow))
}

// backendName is a backend URL without what may be secret in it: user
// information and query.
func backendName(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Sprintf("(an unparsable URL of %d bytes)", len(s))
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
