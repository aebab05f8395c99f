package doctor

import (
	"context"
	"strings"

	"github.com/aerie-dev/aerie/engine"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/worker"
)

// checkEngine tells which engine serves the backend (or takes
// Config.Engine), and says for each feature the run asks for what will
// happen on it. A feature the engine cannot do fails the check, so that
// nothing is queued for a run whose every request would be refused or
// would not do what it says. The checks after it speak the engine's
// dialect.
func checkEngine(ctx context.Context, s *session) Result {
	if s.cfg.Backend == "" {
		return skip("no backend given (--backend)")
	}
	if !s.passed("backend") {
		return skip("backend not healthy (see backend)")
	}
	var found engine.Found
	err := s.untilAnswered(ctx, "the engine to show itself", s.cfg.CheckTimeout, func(ctx context.Context) error {
		var err error
		found, err = engine.Detect(ctx, s.client, s.cfg.Engine)
		return err
	})
	if err != nil {
		return fail("give --engine ("+strings.Join(engine.Names(), ", ")+")", "%v", err)
	}
	s.engine = &found
	if c, err := openai.New(openai.Config{BaseURL: s.cfg.Backend, APIKey: s.cfg.APIKey, Dialect: found.Dialect}); err == nil {
		s.client = c
	}
	want := engine.Wants{TokenIDs: s.tokenIDs(), Samples: s.samples(), AutoWindow: s.cfg.AutoWindow, Extraction: s.extraction() != nil}
	if s.cfg.YieldToServing {
		want.Priority = s.cfg.BatchPriority
		if want.Priority == 0 {
			want.Priority = worker.DefaultBatchPriority
		}
	}
	plan := found.Plan(want)
	lines := make([]string, len(plan))
	status := Pass
	var fixes []string
	for i, l := range plan {
		lines[i] = l.Feature + ": " + l.Text
		switch l.Verdict {
		case engine.Refused:
			status = Fail
			lines[i] = "REFUSED " + lines[i]
			fixes = append(fixes, l.Fix)
		case engine.Unsure:
			if status == Pass {
				status = Warn
			}
			fixes = append(fixes, l.Fix)
		}
	}
	r := result(status, "%s (%s); %s", found.Title, found.By, strings.Join(lines, "; "))
	r.Fix = strings.Join(fixes, "; ")
	return r
}
