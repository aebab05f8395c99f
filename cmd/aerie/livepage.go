package main

import (
	"flag"
	"log/slog"

	"github.com/aerie-dev/aerie/aggregator"
	"github.com/aerie-dev/aerie/livepage"
)

// addHTTPListenFlag is --http-listen, the live page's address.
func addHTTPListenFlag(fs *flag.FlagSet) *string {
	return fs.String("http-listen", envOr("AERIE_HTTP_LISTEN", ""), "host:port to serve the run's live page on (progress, throughput, ETA, workers, failures, answer lengths; JSON at /api/state); empty: none (env AERIE_HTTP_LISTEN)")
}

// startLivePage serves the live page of run on addr. With an empty addr
// it does nothing and returns a nil Observer, no URL and a stop that does
// nothing.
func startLivePage(addr, run string, log *slog.Logger) (obs aggregator.Observer, url string, stop func(), err error) {
	if addr == "" {
		return nil, "", func() {}, nil
	}
	page := livepage.New(run)
	srv, err := livepage.Start(addr, page, log)
	if err != nil {
		return nil, "", nil, err
	}
	log.Info("live page", "url", srv.URL())
	return page, srv.URL(), func() { srv.Close() }, nil
}
