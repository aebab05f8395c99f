package simulator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// shutdownGrace is how long Serve lets requests in flight finish after
// its context ends, with the engine still running, before it stops the
// engine and closes the connections left.
const shutdownGrace = 5 * time.Second

// Serve runs the engine and, once it runs, serves HTTP on l until ctx
// ends: a client that connects earlier waits in l's backlog instead of
// meeting a 503 from /health. Then it
// stops accepting connections, ends hung requests, gives the others up
// to 5s to finish, stops the engine and closes what is left. It returns
// nil after a shutdown that ctx asked for.
//
// During a refuse outage Serve closes l and every connection, and when
// the outage ends it listens again with net.Listen on l's address (an
// error if that fails, e.g. because another process took the port).
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngine()
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(engineCtx) }()
	// Serve nothing before the engine runs: /health would answer 503,
	// and a client that checks it first (a preflight) would give up.
	select {
	case <-s.eng.running:
	case err := <-runDone:
		l.Close()
		return err
	case <-ctx.Done():
		l.Close()
		return nil
	}

	addr := l.Addr()
	var (
		srv       *http.Server // nil while refusing
		serveDone chan error
	)
	for {
		changes := s.outages.changes()
		if s.outages.mode() == OutageRefuse {
			if srv != nil {
				s.refuse(srv)
				<-serveDone
				srv, l = nil, nil
			}
			select {
			case <-changes:
				continue
			case err := <-runDone:
				return err
			case <-ctx.Done():
				s.stop()
				stopEngine()
				return <-runDone
			}
		}
		if srv == nil {
			if l == nil {
				var err error
				if l, err = net.Listen(addr.Network(), addr.String()); err != nil {
					stopEngine()
					<-runDone
					return fmt.Errorf("simulator: listening again on %s after a refuse outage: %w (free the port, or use 503 outages, which keep the listener)", addr, err)
				}
			}
			srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 30 * time.Second}
			serveDone = make(chan error, 1)
			go func(srv *http.Server, l net.Listener, done chan<- error) { done <- srv.Serve(l) }(srv, l, serveDone)
		}
		select {
		case <-changes:
		case err := <-serveDone:
			stopEngine()
			<-runDone
			return fmt.Errorf("simulator: serving on %s: %w", addr, err)
		case err := <-runDone:
			_ = srv.Close()
			<-serveDone
			return err
		case <-ctx.Done():
			return s.drain(srv, addr, serveDone, stopEngine, runDone)
		}
	}
}

// refuse closes the listener and every connection for a refuse outage,
// after any admin request that began it has sent its answer.
func (s *Server) refuse(srv *http.Server) {
	// Holding the lock, no admin answer is being written while the
	// connections are cut, and none starts until they are.
	s.outages.replying.Lock()
	defer s.outages.replying.Unlock()
	_ = srv.Close()
}

// drain shuts srv down once ctx has ended: see Serve.
func (s *Server) drain(srv *http.Server, addr net.Addr, serveDone <-chan error, stopEngine func(), runDone <-chan error) error {
	s.stop()
	graceCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	shutdownErr := srv.Shutdown(graceCtx)
	stopEngine()
	runErr := <-runDone
	if shutdownErr != nil {
		// Requests outlived the grace period; the engine has failed
		// them, so closing now only cuts off what is still being sent.
		_ = srv.Close()
	}
	if err := <-serveDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("simulator: serving on %s: %w", addr, err)
	}
	return runErr
}
