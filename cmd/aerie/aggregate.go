package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
)

func cmdAggregate(ctx context.Context, args []string) error {
	fs, lf := newFlags("aggregate", "--run NAME [--data-dir /data]")
	nf := addNATSFlags(fs, auth.Aggregator)
	run := fs.String("run", "", "run name")
	dataDir := addDataDirFlag(fs, aggregator.DefaultDataDir, "")
	out := fs.String("out", "", "a hidden-states run's output directory on this host, where its dataset goes beside hidden_states/, over the one the run was produced with (--out) or <data-dir>/<run>/: for a shared disk mounted at another path here")
	interval := fs.Duration("event-interval", aggregator.DefaultEventInterval, "period of throughput events")
	exit := fs.Bool("exit-when-done", false, "exit once every prompt of the run has its final outcome written (a replayed prompt's new one included)")
	httpListen := addHTTPListenFlag(fs)
	leaseWait := fs.Duration("lease-wait", aggregator.DefaultLeaseWait, "when another aggregator writes the run, how long to wait for it to stop before giving up (exit status 3); one that died frees the run within 30s")
	metricsListen := addMetricsFlag(fs)
	log, err := parseRunFlags(fs, lf, args, run)
	if err != nil {
		return err
	}
	reg, stopMetrics, err := serveMetrics(ctx, *metricsListen, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	nc, js, err := connect(ctx, nf, "aerie-aggregate", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	page, _, stopPage, err := startLivePage(*httpListen, *run, log)
	if err != nil {
		return err
	}
	defer stopPage()
	a, err := aggregator.New(aggregator.Config{Run: *run, DataDir: *dataDir, Out: *out, EventInterval: *interval, ExitWhenDone: *exit, LeaseWait: *leaseWait, Observer: page, Metrics: reg, Logger: log}, js)
	if err != nil {
		return err
	}
	if err := a.Run(ctx); err != nil {
		var finished *aggregator.FinishedError
		if errors.As(err, &finished) {
			log.Info(finished.Error())
			fmt.Println(finished.Error())
			return nil
		}
		return err
	}
	if *exit && a.Last().Phase == schema.PhaseDone {
		pipeline.AggregatorSummary(*run, *dataDir, a, log).Print(os.Stdout)
	}
	return nil
}
