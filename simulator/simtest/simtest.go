// Package simtest serves aerie's vLLM simulator on a loopback port for
// tests, stopped when the test ends.
package simtest

import (
	"context"
	"net"
	"testing"

	"github.com/aerie-dev/aerie/simulator"
)

// Serve serves a simulator configured by cfg on a random loopback port
// until the test ends, and returns its base URL. A simulator that fails
// while serving fails the test.
func Serve(t testing.TB, cfg simulator.Config) string {
	t.Helper()
	sim, err := simulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("simulator: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}
