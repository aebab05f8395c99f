package natsdial_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/aerie-dev/aerie/broker"
	"github.com/aerie-dev/aerie/natsdial"
)

// logs is a slog handler that keeps the messages logged, and signals
// each one.
type logs struct {
	mu   sync.Mutex
	msgs []string
	seen chan string
}

func newLogs() *logs { return &logs{seen: make(chan string, 100)} }

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	select {
	case l.seen <- r.Message:
	default:
	}
	return nil
}
func (l *logs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logs) WithGroup(string) slog.Handler      { return l }

func (l *logs) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// freePort returns a port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// A command started before its server waits for it, says so, and
// connects once the server is up.
func TestDialWaitsForTheServer(t *testing.T) {
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	l := newLogs()
	type dialed struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		nc, err := natsdial.Dial(context.Background(), url, time.Minute, slog.New(l), nats.NoReconnect())
		done <- dialed{nc, err}
	}()
	select {
	case msg := <-l.seen:
		if msg != "waiting for NATS" {
			t.Fatalf("logged %q first, want waiting for NATS", msg)
		}
	case d := <-done:
		t.Fatalf("Dial returned before any server was up: %v", d.err)
	case <-time.After(30 * time.Second):
		t.Fatal("Dial neither waited nor returned")
	}
	s, err := broker.Start(broker.Config{StoreDir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	select {
	case d := <-done:
		if d.err != nil {
			t.Fatalf("Dial: %v", d.err)
		}
		d.nc.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("Dial did not connect once the server was up")
	}
	if l.count("connected to NATS") != 1 {
		t.Errorf("logged %v, want a line saying it connected", l.msgs)
	}
}

// Without a wait, or once it is over, Dial fails with the last error;
// the second says how long it waited.
func TestDialGivesUp(t *testing.T) {
	url := "nats://127.0.0.1:" + strconv.Itoa(freePort(t))
	l := newLogs()
	_, err := natsdial.Dial(context.Background(), url, 0, slog.New(l))
	if !errors.Is(err, nats.ErrNoServers) || strings.Contains(err.Error(), "waited") || len(l.msgs) != 0 {
		t.Errorf("no wait: %v, logged %v; want no servers, at once, nothing logged", err, l.msgs)
	}
	_, err = natsdial.Dial(context.Background(), url, time.Second, slog.New(l))
	if !errors.Is(err, nats.ErrNoServers) || !strings.Contains(err.Error(), "--connect-wait") {
		t.Errorf("a wait of 1s: %v, want no servers after waiting (--connect-wait)", err)
	}
}

// The end of ctx ends the wait.
func TestDialStopsWithTheContext(t *testing.T) {
	url := "nats://127.0.0.1:" + strconv.Itoa(freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	l := newLogs()
	done := make(chan error, 1)
	go func() {
		_, err := natsdial.Dial(ctx, url, time.Hour, slog.New(l))
		done <- err
	}()
	<-l.seen // it waits
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Dial went on waiting after its context ended")
	}
}

// A server that answers and refuses the credentials is not waited for.
func TestDialDoesNotWaitForARefusal(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	s, err := broker.Start(broker.Config{StoreDir: t.TempDir(), Users: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	l := newLogs()
	_, err = natsdial.Dial(context.Background(), s.ClientURL(), time.Hour, slog.New(l))
	if err == nil || !natsdial.Refused(err) || l.count("waiting for NATS") != 0 {
		t.Errorf("no key against a server of keys: %v (refused: %v), logged %v; want a refusal at once", err, err != nil && natsdial.Refused(err), l.msgs)
	}
}

func TestRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoServers, false},
		{nats.ErrTimeout, false},
		{errors.New("dial tcp 127.0.0.1:4222: connect: connection refused"), false},
		{nats.ErrAuthorization, true},
		{errors.New("nats: authorization violation"), true},
		{nats.ErrSecureConnRequired, true},
		{errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority"), true},
	} {
		if got := natsdial.Refused(c.err); got != c.want {
			t.Errorf("Refused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                      "nats://127.0.0.1:4222",
		"nats://user:pw@a:4222, nats://token@b:4222": "nats://[redacted]@a:4222,nats://[redacted]@b:4222",
		"nats://a:4222,nats://s3cr3t@b:4222":         "nats://a:4222,nats://[redacted]@b:4222",
	} {
		if got := natsdial.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
