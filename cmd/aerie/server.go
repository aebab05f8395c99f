package main

import (
	"context"
	"fmt"
	"github.com/aerie-dev/aerie/auth"
	"github.com/nats-io/nats-server/v2/server"
	"net"
	"os"
	"strconv"

	"github.com/aerie-dev/aerie/broker"
)

func cmdServer(ctx context.Context, args []string) error {
	fs, lf := newFlags("server", "[--listen 127.0.0.1:4222] [--store DIR] [--auth-dir DIR]")
	listen := fs.String("listen", "127.0.0.1:4222", "host:port for clients")
	authDir := fs.String("auth-dir", os.Getenv("AERIE_AUTH_DIR"), "directory of the role nkey seeds (producer.nk, worker.nk, aggregator.nk, admin.nk): created once (0700, seeds 0600), reused after; the server then admits only those roles, each with its permissions (env AERIE_AUTH_DIR; empty: no authentication)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate the server presents to clients (with --tls-key: clients must connect over TLS)")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	tlsCA := fs.String("tls-ca", "", "PEM CA bundle: clients must present a certificate it signed (mutual TLS); needs --tls-cert")
	store := fs.String("store", defaultStore(), "JetStream store directory (with AERIE_DATA_DIR set: its nats/ subdirectory, where aerie run keeps its store)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return err
	}
	host, p, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("--listen %q: want host:port", *listen)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return fmt.Errorf("--listen %q: port is not a number", *listen)
	}
	cfg := broker.Config{StoreDir: *store, Host: host, Port: port, Logger: log}
	if *authDir != "" {
		public, err := auth.EnsureDir(*authDir)
		if err != nil {
			return fmt.Errorf("--auth-dir: %w", err)
		}
		if cfg.Users, err = auth.NkeyUsers(public); err != nil {
			return fmt.Errorf("--auth-dir: %w", err)
		}
		log.Info("clients must authenticate with a role nkey", "dir", *authDir)
	}
	if *tlsCert != "" || *tlsKey != "" || *tlsCA != "" {
		if *tlsCert == "" || *tlsKey == "" {
			return fmt.Errorf("--tls-cert and --tls-key go together (got cert %q, key %q)", *tlsCert, *tlsKey)
		}
		cfg.TLS, err = server.GenTLSConfig(&server.TLSConfigOpts{CertFile: *tlsCert, KeyFile: *tlsKey, CaFile: *tlsCA, Verify: *tlsCA != ""})
		if err != nil {
			return fmt.Errorf("--tls-cert %s / --tls-key %s / --tls-ca %q: %w", *tlsCert, *tlsKey, *tlsCA, err)
		}
	}
	srv, err := broker.Start(cfg)
	if err != nil {
		return err
	}
	log.Info("NATS server with JetStream ready", "url", srv.ClientURL(), "store", *store)
	<-ctx.Done()
	log.Info("shutting down NATS server")
	srv.Shutdown()
	return nil
}
