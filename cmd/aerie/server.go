package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/aerie-dev/aerie/broker"
)

func cmdServer(ctx context.Context, args []string) error {
	fs, lf := newFlags("server", "[--listen 127.0.0.1:4222] [--store DIR]")
	listen := fs.String("listen", "127.0.0.1:4222", "host:port for clients")
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
	srv, err := broker.Start(broker.Config{StoreDir: *store, Host: host, Port: port, Logger: log})
	if err != nil {
		return err
	}
	log.Info("NATS server with JetStream ready", "url", srv.ClientURL(), "store", *store)
	<-ctx.Done()
	log.Info("shutting down NATS server")
	srv.Shutdown()
	return nil
}
