package worker_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/provision"
	"github.com/aerie-dev/aerie/worker"
)

// A heartbeat names the worker's host and its backend, and the backend
// as the worker was given it: the client refuses a URL with credentials
// or a query, so none can reach an event.
func TestHeartbeatNamesHostAndBackend(t *testing.T) {
	b := setup(t, 5, provision.Options{})
	_, url := newFakeLLM(t, &fakeLLM{duration: 10 * time.Millisecond})
	hb := b.heartbeats(t)
	b.start(t, worker.Config{Window: 2, Heartbeat: 50 * time.Millisecond}, url+"/v1/")
	brokertest.Eventually(t, 20*time.Second, func() bool { return hb.last() != nil }, "a heartbeat")
	h := hb.last()
	host, _ := os.Hostname()
	if h.Host != host {
		t.Errorf("heartbeat host %q, want %q", h.Host, host)
	}
	if h.Backend != strings.TrimSuffix(url, "/") {
		t.Errorf("heartbeat backend %q, want %q", h.Backend, url)
	}
}
