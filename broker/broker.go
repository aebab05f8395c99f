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
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	// MaxStore bounds JetStream's file store in bytes (max_file_store);
	// zero leaves it to the server, which takes most of the disk's free
	// space. Tests of a small store set it.
	MaxStore int64
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

	// Name is the server's name. In a cluster it must differ on every
	// node: JetStream places replicas and elects leaders by name, and a
	// node that comes back under the same name (even with an empty store)
	// takes its old place. Empty means "aerie", right for a server alone.
	Name string
	// ClusterListen is the host:port where the other nodes of a cluster
	// connect (routes). Empty: no cluster, the server stands alone, and
	// the other cluster fields are ignored.
	ClusterListen string
	// ClusterName is the cluster's name, the same on every node. Empty
	// means "aerie".
	ClusterName string
	// Routes are the nats-route://host:port URLs of the cluster's nodes;
	// the node connects to every one (it recognises and skips itself, so
	// every node may be given the same list). Credentials in a URL are
	// replaced by RouteUser's. Required with ClusterListen: JetStream in
	// a cluster will not start without routes.
	Routes []string
	// RouteUser and RoutePassword, when RouteUser is not empty, are the
	// credentials every route must present, in both directions: a server
	// that does not know them cannot join the cluster, and so cannot read
	// or replace what the streams hold. Empty: any server that reaches
	// ClusterListen may join, as on a developer's machine.
	RouteUser, RoutePassword string
	// ClusterTLS, when not nil, makes routes use TLS with this
	// configuration, for both the routes this node accepts and those it
	// opens (a ClientCAs pool with RequireAndVerifyClientCert makes each
	// side prove itself with a certificate). Nil: routes in plain TCP.
	ClusterTLS *tls.Config
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
	name := cfg.Name
	if name == "" {
		name = "aerie"
	}
	opts := &server.Options{
		ServerName:        name,
		Host:              host,
		Port:              port,
		JetStream:         true,
		StoreDir:          cfg.StoreDir,
		JetStreamMaxStore: cfg.MaxStore,
		MaxPayload:        maxPayload,
		NoSigs:            true,
		Nkeys:             cfg.Users,
	}
	if cfg.TLS != nil {
		opts.TLS = true
		opts.TLSConfig = cfg.TLS
		opts.TLSVerify = cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		opts.TLSTimeout = 5
	}
	if cfg.ClusterListen != "" {
		if err := clusterOptions(opts, cfg); err != nil {
			return nil, err
		}
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
	// nats-server logs a port it cannot bind and goes on waiting: find
	// that out now, not after readyTimeout.
	if err := portFree("clients", host, opts.Port); err != nil {
		lock.Release()
		return nil, err
	}
	if cfg.ClusterListen != "" {
		if err := portFree("routes", opts.Cluster.Host, opts.Cluster.Port); err != nil {
			lock.Release()
			return nil, err
		}
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

// PortInUseError is a listen address that cannot be listened on, most
// often because another process holds it.
type PortInUseError struct {
	// What listens there: "clients" or "routes".
	What string
	Addr string
	Err  error
}

func (e *PortInUseError) Error() string {
	if !errors.Is(e.Err, syscall.EADDRINUSE) {
		return fmt.Sprintf("broker: cannot listen for %s on %s: %v: give a host that is one of this machine's addresses (0.0.0.0 for all) and a port this user may open", e.What, e.Addr, e.Err)
	}
	return fmt.Sprintf("broker: cannot listen for %s on %s: %v: another process has it (ss -ltnp 'sport = :%s' names it); stop that process or listen on another port",
		e.What, e.Addr, e.Err, portOf(e.Addr))
}

func (e *PortInUseError) Unwrap() error { return e.Err }

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// portFree reports, as a *PortInUseError, that host:port cannot be
// listened on; a random port (-1 or 0) is always free.
func portFree(what, host string, port int) error {
	if port <= 0 {
		return nil
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return &PortInUseError{What: what, Addr: addr, Err: err}
	}
	return l.Close()
}

// clusterOptions fills in the cluster part of opts from cfg.
func clusterOptions(opts *server.Options, cfg Config) error {
	host, port, err := splitHostPort(cfg.ClusterListen)
	if err != nil {
		return fmt.Errorf("broker: cluster listen address %q: %w", cfg.ClusterListen, err)
	}
	opts.Cluster.Host, opts.Cluster.Port = host, port
	opts.Cluster.Name = cfg.ClusterName
	if opts.Cluster.Name == "" {
		opts.Cluster.Name = "aerie"
	}
	if (cfg.RouteUser == "") != (cfg.RoutePassword == "") {
		return errors.New("broker: a route user needs a route password, and the other way round")
	}
	opts.Cluster.Username, opts.Cluster.Password = cfg.RouteUser, cfg.RoutePassword
	if len(cfg.Routes) == 0 {
		return fmt.Errorf("broker: cluster on %s has no routes: JetStream in a cluster needs the nats-route://host:port of the other nodes", cfg.ClusterListen)
	}
	for _, r := range cfg.Routes {
		u, err := RouteURL(r)
		if err != nil {
			return err
		}
		if cfg.RouteUser != "" {
			u.User = url.UserPassword(cfg.RouteUser, cfg.RoutePassword)
		} else {
			u.User = nil
		}
		opts.Routes = append(opts.Routes, u)
	}
	if cfg.ClusterTLS != nil {
		opts.Cluster.TLSConfig = cfg.ClusterTLS
		opts.Cluster.TLSTimeout = 5
	}
	return nil
}

// RouteURL parses one route of a cluster: nats-route://host:port (or
// nats://host:port, the same).
func RouteURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "nats-route" && u.Scheme != "nats") || u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("broker: route %q: want nats-route://host:port", redactURL(s))
	}
	return u, nil
}

// redactURL hides a password in s, when s parses as a URL.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

// splitHostPort splits host:port; an empty host means every interface
// (a cluster is meant to be reached from other hosts).
func splitHostPort(hp string) (string, int, error) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, errors.New("want host:port")
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a port number", p)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// ClusterAddr is the host:port the server accepts routes on; empty when
// it is not in a cluster.
func (s *Server) ClusterAddr() string {
	a := s.ns.ClusterAddr()
	if a == nil {
		return ""
	}
	return net.JoinHostPort(a.IP.String(), strconv.Itoa(a.Port))
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
