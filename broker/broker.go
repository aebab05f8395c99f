// Package broker runs a NATS server with JetStream inside the aerie
// process: for `aerie run` (everything on one machine), `aerie server`
// (a development broker for several aerie processes) and tests. Production
// runs a nats-server cluster instead; see deploy/.
package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/aerie-dev/aerie/lockfile"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DefaultMaxPayload is the largest message the embedded server accepts:
// 8 MiB instead of NATS's 1 MiB default, so that long-context prompts and
// long answers fit. A nats-server cluster needs `max_payload: 8MB` in its
// configuration for the same (see deploy/nats-server.conf).
const DefaultMaxPayload = 8 << 20

// Config configures an embedded server. The zero value is not usable:
// StoreDir is required.
type Config struct {
	// StoreDir holds JetStream's file store. Required: a broker that
	// forgets its streams on restart could not resume a run. The server
	// holds an exclusive lock on it (LockFileName) while it runs, so a
	// second server on the same store refuses to start.
	StoreDir string
	// Host is the listen address; empty means 127.0.0.1, so a development
	// broker is not exposed to the network by accident.
	Host string
	// Port is the client port; 0 means a random free port (tests), use 4222
	// for the usual one.
	Port int
	// MaxPayload in bytes; zero means DefaultMaxPayload.
	MaxPayload int32
	// SyncInterval is how often JetStream flushes to disk. Zero means every
	// write is fsynced before it is acknowledged ("sync_interval: always"):
	// JetStream's own default of two minutes can lose acknowledged prompts
	// and results on power loss, and LLM traffic is slow enough to afford
	// an fsync per message.
	SyncInterval time.Duration
	// Logger receives the server's warnings and errors; nil discards them.
	Logger *slog.Logger

	// Users, when not empty, are the only clients the server admits,
	// each by nkey with its permissions (see package auth). Empty: anyone
	// who reaches the port may do anything, as on a developer's machine.
	Users []*server.NkeyUser

	// TLS, when not nil, makes clients connect over TLS with this
	// configuration (a ClientCAs pool with RequireAndVerifyClientCert asks
	// for client certificates too). Nil: plain TCP.
	TLS *tls.Config
}

// Server is a running embedded NATS server.
type Server struct {
	ns       *server.Server
	lock     *lockfile.Lock
	stopOnce sync.Once
}

// Start takes the store's lock, starts a server and waits until it
// accepts connections. It returns a *StoreInUseError when another server
// holds the store.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("broker: a store directory is required (JetStream keeps prompts and results there)")
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	maxPayload := cfg.MaxPayload
	if maxPayload == 0 {
		maxPayload = DefaultMaxPayload
	}
	opts := &server.Options{
		ServerName: "aerie",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		MaxPayload: maxPayload,
		NoSigs:     true,
		Nkeys:      cfg.Users,
	}
	if cfg.TLS != nil {
		opts.TLS = true
		opts.TLSConfig = cfg.TLS
		opts.TLSVerify = cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		opts.TLSTimeout = 5
	}
	if cfg.SyncInterval == 0 {
		opts.SyncAlways = true
	} else {
		opts.SyncInterval = cfg.SyncInterval
	}
	lock, err := lockStore(cfg.StoreDir, hostPort(host, cfg.Port))
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		lock.Release()
		return nil, fmt.Errorf("broker: configure server on %s:%d with store %s: %w", host, cfg.Port, cfg.StoreDir, err)
	}
	if cfg.Logger != nil {
		ns.SetLoggerV2(&logAdapter{l: cfg.Logger.With("component", "nats-server")}, false, false, false)
	}
	go ns.Start()
	if !ns.ReadyForConnections(readyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		lock.Release()
		return nil, fmt.Errorf("broker: server on %s:%d did not become ready within %v (is the port in use? is %s writable?)", host, cfg.Port, readyTimeout, cfg.StoreDir)
	}
	s := &Server{ns: ns, lock: lock}
	if err := lock.SetAddr(s.Addr()); err != nil {
		s.Shutdown()
		return nil, err
	}
	return s, nil
}

// readyTimeout bounds how long Start waits for the server to accept
// connections; recovering a large store takes a few seconds.
const readyTimeout = 30 * time.Second

// ClientURL is the URL other processes connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Addr is the host:port the server listens on.
func (s *Server) Addr() string {
	a := s.ns.Addr().(*net.TCPAddr)
	return net.JoinHostPort(a.IP.String(), strconv.Itoa(a.Port))
}

// Connect opens an in-process client connection (no TCP) with the given
// options added to aerie's defaults.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.ns), nats.Name("aerie-embedded")}, opts...)
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: connect in process: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server, waits until it has stopped, flushing the
// store, and then releases the store's lock. Calling it again does
// nothing.
func (s *Server) Shutdown() {
	s.stopOnce.Do(func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.lock.Release()
	})
}

// NATS exposes the underlying server for tests that need to restart or
// inspect it.
func (s *Server) NATS() *server.Server { return s.ns }

// logAdapter sends the server's log lines to slog. Notices are debug
// level: the server is chatty at start-up and aerie reports what matters.
type logAdapter struct{ l *slog.Logger }

func (a *logAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Tracef(format string, v ...any)  {}
