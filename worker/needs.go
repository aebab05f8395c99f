package worker

import (
	"context"

	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/schema"
)

// waitServable holds a worker of one run (Config.Run) whose run needs
// features this build lacks: it takes none of the run's prompts, says
// why in its log once and in a heartbeat every period, and returns the
// run's manifest once it is put again as one it can serve
// (provision.WaitServable).
func (w *runWatch) waitServable(ctx context.Context, m *schema.Manifest, lack *schema.LackError) (*schema.Manifest, error) {
	w.log.Error("leaving the run alone: it needs features this worker lacks; no prompt of it is taken until this host runs an aerie that has them",
		"lacks", lack.Lacking, "written_by", lack.By, "version", schema.BuildVersion(), "err", lack)
	return provision.WaitServable(ctx, w.link.js, m, lack, w.cfg.Heartbeat,
		func(l *schema.LackError) { w.report.skipped(m.Run, l.Error(), l) }, w.log)
}
