package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/aerie-dev/aerie/auth"
	"github.com/nats-io/nats-server/v2/server"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aerie-dev/aerie/broker"
)

func cmdServer(ctx context.Context, args []string) error {
	fs, lf := newFlags("server", "[--listen 127.0.0.1:4222] [--store DIR] [--auth-dir DIR] [--name NAME --cluster-listen HOST:PORT --routes URL,...]")
	listen := fs.String("listen", "127.0.0.1:4222", "host:port for clients")
	authDir := fs.String("auth-dir", os.Getenv("AERIE_AUTH_DIR"), "directory of the role nkey seeds (producer.nk, worker.nk, aggregator.nk, admin.nk): created once (0700, seeds 0600), reused after; the server then admits only those roles, each with its permissions (env AERIE_AUTH_DIR; empty: no authentication)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate the server presents to clients (with --tls-key: clients must connect over TLS)")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	tlsCA := fs.String("tls-ca", "", "PEM CA bundle: clients must present a certificate it signed (mutual TLS); needs --tls-cert")
	name := fs.String("name", "", "server name, different on every node of a cluster; a node restarted under its name (even with an empty store) takes its old place (empty: aerie)")
	clusterListen := fs.String("cluster-listen", "", "host:port where the other nodes connect (routes); set it, with --routes, to form a cluster (empty: no cluster)")
	routes := fs.String("routes", "", "comma-separated nats-route://host:port of the cluster's nodes; every node may list all of them, itself included. With --auth-dir routes present the auth dir's route.secret, the same file on every node")
	clusterName := fs.String("cluster-name", "aerie", "cluster name, the same on every node")
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
	cfg := broker.Config{StoreDir: *store, Host: host, Port: port, Logger: log, Name: *name}
	if *clusterListen == "" && *routes != "" {
		return fmt.Errorf("--routes %q needs --cluster-listen HOST:PORT, where the other nodes connect", *routes)
	}
	if *clusterListen != "" {
		if *name == "" {
			return fmt.Errorf("--cluster-listen %s needs --name: every node of a cluster needs a name of its own", *clusterListen)
		}
		cfg.ClusterListen, cfg.ClusterName = *clusterListen, *clusterName
		for _, r := range strings.Split(*routes, ",") {
			if r = strings.TrimSpace(r); r == "" {
				continue
			}
			if _, err := broker.RouteURL(r); err != nil {
				return fmt.Errorf("--routes: %w", err)
			}
			cfg.Routes = append(cfg.Routes, r)
		}
		if len(cfg.Routes) == 0 {
			return fmt.Errorf("--cluster-listen %s needs --routes nats-route://host:port,...: the cluster's nodes (this one may be among them)", *clusterListen)
		}
		if *authDir != "" {
			secret, err := auth.EnsureRouteSecret(*authDir)
			if err != nil {
				return fmt.Errorf("--auth-dir: %w", err)
			}
			cfg.RouteUser, cfg.RoutePassword = auth.RouteUser, secret
			log.Info("routes must present the route secret", "file", filepath.Join(*authDir, auth.RouteSecretFile))
		} else {
			log.Warn("cluster routes are not authenticated: any server that reaches --cluster-listen may join; use --auth-dir", "cluster_listen", *clusterListen)
		}
	}
	if *authDir != "" {
		var created []string
		for _, r := range auth.Roles {
			if _, err := os.Stat(filepath.Join(*authDir, auth.SeedFile(r))); errors.Is(err, os.ErrNotExist) {
				created = append(created, string(r))
			}
		}
		public, err := auth.EnsureDir(*authDir)
		if err != nil {
			return fmt.Errorf("--auth-dir: %w", err)
		}
		if cfg.Users, err = auth.NkeyUsers(public); err != nil {
			return fmt.Errorf("--auth-dir: %w", err)
		}
		args := []any{"dir", *authDir}
		if len(created) > 0 {
			args = append(args, "created", strings.Join(created, ","))
		}
		for _, r := range auth.Roles {
			args = append(args, string(r), filepath.Join(*authDir, auth.SeedFile(r)))
		}
		log.Info("clients must authenticate with their role's nkey seed: give each host only its role's (--nkey FILE)", args...)
	}
	if *tlsCert != "" || *tlsKey != "" || *tlsCA != "" {
		if *tlsCert == "" || *tlsKey == "" {
			return fmt.Errorf("--tls-cert and --tls-key go together (got cert %q, key %q)", *tlsCert, *tlsKey)
		}
		cfg.TLS, err = server.GenTLSConfig(&server.TLSConfigOpts{CertFile: *tlsCert, KeyFile: *tlsKey, CaFile: *tlsCA, Verify: *tlsCA != ""})
		if err != nil {
			return fmt.Errorf("--tls-cert %s / --tls-key %s / --tls-ca %q: %w", *tlsCert, *tlsKey, *tlsCA, err)
		}
		if cfg.ClusterListen != "" {
			// Routes use the same certificate; with --tls-ca each node
			// must present one the CA signed, as clients must.
			cfg.ClusterTLS, err = server.GenTLSConfig(&server.TLSConfigOpts{CertFile: *tlsCert, KeyFile: *tlsKey, CaFile: *tlsCA, Verify: *tlsCA != ""})
			if err != nil {
				return fmt.Errorf("route TLS from --tls-cert %s / --tls-key %s / --tls-ca %q: %w", *tlsCert, *tlsKey, *tlsCA, err)
			}
			// A node dials the others as a client too: it must trust the
			// same CA for their certificates (nats-server does the same
			// for a cluster's tls block), or every route fails with
			// "certificate signed by unknown authority".
			cfg.ClusterTLS.RootCAs = cfg.ClusterTLS.ClientCAs
		}
	}
	srv, err := broker.Start(cfg)
	if err != nil {
		return err
	}
	if a := srv.ClusterAddr(); a != "" {
		log.Info("NATS server with JetStream ready", "url", srv.ClientURL(), "store", *store, "name", *name, "cluster", *clusterName, "routes_on", a)
	} else {
		log.Info("NATS server with JetStream ready", "url", srv.ClientURL(), "store", *store)
	}
	<-ctx.Done()
	log.Info("shutting down NATS server")
	srv.Shutdown()
	return nil
}
