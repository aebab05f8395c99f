package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/nats-io/nats-server/v2/server"
)

const routeUser, routeSecret = "aerie-route", "test-route-secret-0123456789"

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr(t *testing.T) string { return brokertest.FreeAddr(t) }

// node starts one embedded server of a cluster on loopback, taking
// routes on listen.
func node(t *testing.T, name, listen, user, password string, log *slog.Logger, routes ...string) *broker.Server {
	t.Helper()
	s, err := broker.Start(broker.Config{
		StoreDir: t.TempDir(), Name: name, ClusterListen: listen,
		Routes: routes, RouteUser: user, RoutePassword: password, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// waitFor polls cond every 20ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// routeConnect opens a raw route connection to addr, sends CONNECT with
// the given credentials (none when user is empty) and a PING, and returns
// the server's first answer after its INFO (or why there was none).
func routeConnect(t *testing.T, addr, user, password string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	info, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") {
		return fmt.Sprintf("no INFO: first line %q, %v", info, err)
	}
	creds := ""
	if user != "" {
		creds = fmt.Sprintf(`"user":%q,"pass":%q,`, user, password)
	}
	fmt.Fprintf(c, "CONNECT {%s\"verbose\":false,\"pedantic\":false,\"name\":\"intruder\",\"cluster\":\"aerie\",\"headers\":true}\r\nPING\r\n", creds)
	line, err := r.ReadString('\n')
	if err != nil {
		return "closed: " + err.Error()
	}
	return strings.TrimSpace(line)
}

// Nodes that share the route secret form a cluster; a route that
// presents no credentials, or the wrong ones, is refused, and so is a
// whole server that does not know the secret.
func TestClusterRoutesAuthenticated(t *testing.T) {
	var logs lines
	addrA, addrB := freeAddr(t), freeAddr(t)
	routeA, routeB := "nats-route://"+addrA, "nats-route://"+addrB
	a := node(t, "a", addrA, routeUser, routeSecret, slog.New(&logs), routeA, routeB)
	b := node(t, "b", addrB, routeUser, routeSecret, nil, routeA, routeB)
	waitFor(t, 10*time.Second, "nodes sharing the route secret did not connect", func() bool {
		return a.NATS().NumRoutes() > 0 && b.NATS().NumRoutes() > 0
	})

	if got := routeConnect(t, a.ClusterAddr(), "", ""); !strings.Contains(got, "Authorization Violation") {
		t.Errorf("a route without credentials got %q, want -ERR 'Authorization Violation'", got)
	}
	if got := routeConnect(t, a.ClusterAddr(), routeUser, "wrong-secret-0123456789"); !strings.Contains(got, "Authorization Violation") {
		t.Errorf("a route with the wrong secret got %q, want -ERR 'Authorization Violation'", got)
	}
	if got := routeConnect(t, a.ClusterAddr(), routeUser, routeSecret); got != "PONG" {
		t.Errorf("a route with the secret got %q, want PONG", got)
	}

	before := logs.count("authentication error")
	c := node(t, "c", freeAddr(t), "", "", nil, routeA)
	waitFor(t, 10*time.Second, "node a logged no refusal of a server without the secret", func() bool {
		return logs.count("authentication error") > before
	})
	// c registers its route to a for the moment between a's INFO and a's
	// refusal; what matters is that the route is closed and that neither
	// member of the cluster ever counts c among its routes.
	waitFor(t, 10*time.Second, "a server without the route secret kept a route", func() bool {
		return c.NATS().NumRoutes() == 0
	})
	for _, n := range []*broker.Server{a, b} {
		rz, err := n.NATS().Routez(&server.RoutezOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rz.Routes {
			if r.RemoteName == "c" {
				t.Errorf("node %s has a route to c, which does not know the route secret", n.NATS().Name())
			}
		}
	}
}

func TestClusterConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  broker.Config
		want string
	}{
		{"bad listen", broker.Config{ClusterListen: "6222"}, "want host:port"},
		{"no routes", broker.Config{ClusterListen: "127.0.0.1:-1"}, "has no routes"},
		{"bad route", broker.Config{ClusterListen: "127.0.0.1:-1", Routes: []string{"http://x:1"}}, "want nats-route://host:port"},
		{"route without port", broker.Config{ClusterListen: "127.0.0.1:-1", Routes: []string{"nats-route://x"}}, "want nats-route://host:port"},
		{"user without password", broker.Config{ClusterListen: "127.0.0.1:-1", Routes: []string{"nats-route://127.0.0.1:1"}, RouteUser: "u"}, "route user needs a route password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.StoreDir, tc.cfg.Name = t.TempDir(), "n"
			s, err := broker.Start(tc.cfg)
			if err == nil {
				s.Shutdown()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// lines is a slog handler that keeps every message, for tests to wait on.
type lines struct {
	mu   sync.Mutex
	msgs []string
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, strings.ToLower(r.Message))
	return nil
}
func (l *lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lines) WithGroup(string) slog.Handler      { return l }

func (l *lines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// With ClusterTLS the nodes' routes use TLS, each node proving itself
// with a certificate the cluster's CA signed: two nodes with such
// certificates form a cluster, and a route in plain TCP is refused.
func TestClusterRouteTLS(t *testing.T) {
	cfg := routeTLS(t)
	addrA, addrB := freeAddr(t), freeAddr(t)
	routes := []string{"nats-route://" + addrA, "nats-route://" + addrB}
	start := func(name, listen string) *broker.Server {
		s, err := broker.Start(broker.Config{StoreDir: t.TempDir(), Name: name, ClusterListen: listen, Routes: routes,
			RouteUser: routeUser, RoutePassword: routeSecret, ClusterTLS: cfg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		return s
	}
	a, b := start("a", addrA), start("b", addrB)
	waitFor(t, 10*time.Second, "nodes with route TLS did not connect", func() bool {
		return a.NATS().NumRoutes() > 0 && b.NATS().NumRoutes() > 0
	})
	if got := routeConnect(t, a.ClusterAddr(), routeUser, routeSecret); got == "PONG" {
		t.Error("a plain-TCP route with the secret was accepted by a node that requires route TLS")
	}
}

// routeTLS is a route TLS configuration from a throwaway CA: one
// certificate for 127.0.0.1 valid as server and client, and the CA that
// every peer's certificate must chain to.
func routeTLS(t *testing.T) *tls.Config {
	t.Helper()
	return brokertest.NewPKI(t).MutualTLS(t, "aerie node", "127.0.0.1")
}
