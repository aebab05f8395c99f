package main_test

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A command started while its NATS server is down waits for it, saying
// so, and does its work once the server is up; with --connect-wait 0 it
// fails at once and says what to do.
func TestCommandsWaitForNATS(t *testing.T) {
	bin := buildAerie(t)
	addr := freeAddr(t)
	url := "nats://" + addr

	p := aerie(t, bin, "runs", "ls", "--nats", url, "--connect-wait", "0")
	select {
	case err := <-p.done:
		if err == nil || !strings.Contains(p.stderr.String(), "is the server running?") {
			t.Fatalf("--connect-wait 0 without a server: err %v, stderr:\n%s", err, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("--connect-wait 0 went on waiting")
	}

	// Something that takes connections and drops them, as a server
	// going down does, until the command has tried at least once.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tried := make(chan struct{})
	go func() {
		first := true
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			if first {
				close(tried)
				first = false
			}
		}
	}()
	q := aerie(t, bin, "runs", "ls", "--nats", url)
	select {
	case <-tried:
	case err := <-q.done:
		t.Fatalf("runs ls gave up before a server was up: %v\n%s", err, q.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("runs ls never tried to connect")
	}
	ln.Close()
	start(t, bin, "server", "--listen", addr, "--store", filepath.Join(t.TempDir(), "nats"))
	q.wait(t, time.Minute)
	if !strings.Contains(q.stderr.String(), "waiting for NATS") {
		t.Errorf("runs ls did not say it waited:\n%s", q.stderr.String())
	}
}
