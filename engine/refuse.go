package engine

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/aerie-dev/aerie/schema"
)

// Refuser returns, for worker.Config.Refuse, the check of each run a
// worker meets against f, for workers whose requests carry priority (0
// when they do not yield): an error naming the first feature f cannot
// do, or nil. The first time it sees a run it logs, to log, what f does
// differently for it (token ids unstreamed, samples as requests).
func (f Found) Refuser(priority int, log *slog.Logger) func(*schema.Manifest) error {
	var seen sync.Map
	return func(m *schema.Manifest) error {
		plan := f.Plan(ForRun(m.ReturnTokenIDs, m.Samples, m.TaskKind() == schema.TaskHiddenStates, priority))
		if refused := Refusals(plan); len(refused) > 0 {
			return fmt.Errorf("%s (%s) cannot serve it: %s", f.Title, f.By, refused[0])
		}
		if _, told := seen.LoadOrStore(m.Run, true); !told && log != nil {
			for _, l := range plan {
				if l.Verdict == Adapted {
					log.Info("the engine serves this run in its own way", "run", m.Run, "engine", f.Name, "feature", l.Feature, "how", l.Text)
				}
			}
		}
		return nil
	}
}
