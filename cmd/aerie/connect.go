package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/natsdial"
)

// connect opens a NATS connection that reconnects forever (a worker must
// outlive a broker restart) and a JetStream context on it. A server that
// does not answer yet is waited for, up to --connect-wait.
func connect(ctx context.Context, nf *natsFlags, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: we closed the connection ourselves
				log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("reconnected to NATS", "url", nc.ConnectedUrlRedacted())
		}),
	}
	ao, err := nf.authOptions()
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, ao...)
	nc, err := natsdial.Dial(ctx, nf.url, nf.wait(), log, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w (%s)", natsdial.Redact(nf.url), err, nf.connectHint(err))
	}
	if nf.nkey != "" || nf.creds != "" {
		// Another role's key would make every request wait out its
		// timeout: the replies go to an inbox it may not read.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := auth.CheckRole(cctx, nc, nf.role, strings.Replace(name, "aerie-", "aerie ", 1))
		if err == nil {
			// The right role's key may still lack a permission its work
			// needs, under an older or edited users.conf.
			err = doctor.MissingPermissions(cctx, nc, nf.role)
		}
		cancel()
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream on %s: %w", natsdial.Redact(nf.url), err)
	}
	return nc, js, nil
}

// connectHint says what to do about a failed connection: credentials
// or TLS when the server refused them, else whether it runs at all.
func (nf *natsFlags) connectHint(err error) string {
	msg := strings.ToLower(err.Error())
	switch {
	case errors.Is(err, nats.ErrAuthorization) || strings.Contains(msg, "authorization violation"):
		if nf.nkey == "" && nf.creds == "" {
			return fmt.Sprintf("the server admits only known keys: give --nkey with the %s seed (%s, written by aerie auth init or aerie server --auth-dir) or set AERIE_NATS_NKEY", nf.role, auth.SeedFile(nf.role))
		}
		return fmt.Sprintf("the server does not know this key: check that it is the %s seed of this cluster's auth directory and that the servers' users.conf is the one written with it", nf.role)
	case errors.Is(err, nats.ErrSecureConnRequired) || strings.Contains(msg, "secure connection") && strings.Contains(msg, "required"):
		return "the server speaks TLS only: give --tls-ca with the CA that signed its certificate (and --tls-cert/--tls-key if it asks for client certificates)"
	case strings.Contains(msg, "tls") || strings.Contains(msg, "certificate") || strings.Contains(msg, "x509"):
		return "TLS failed: check --tls-ca against the server's certificate, and --tls-cert/--tls-key if the server asks for client certificates"
	}
	return "is the server running? try `aerie server` or check --nats"
}

// authOptions are the options that identify the command: its credentials
// or nkey, and the inbox prefix of its role.
func (nf *natsFlags) authOptions() ([]nats.Option, error) {
	if _, err := nf.connectWait.get(); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.CustomInboxPrefix(auth.InboxPrefix(nf.role))}
	if nf.creds != "" {
		opts = append(opts, nats.UserCredentials(nf.creds))
	}
	if nf.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(nf.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w (give the %s seed written by aerie server --auth-dir or aerie auth init)", nf.nkey, err, nf.role)
		}
		opts = append(opts, o)
	}
	if nf.tlsCA != "" {
		opts = append(opts, nats.RootCAs(nf.tlsCA))
	}
	if nf.tlsCert != "" || nf.tlsKey != "" {
		if nf.tlsCert == "" || nf.tlsKey == "" {
			return nil, fmt.Errorf("--tls-cert and --tls-key go together (got cert %q, key %q)", nf.tlsCert, nf.tlsKey)
		}
		opts = append(opts, nats.ClientCert(nf.tlsCert, nf.tlsKey))
	}
	return opts, nil
}

// wait is --connect-wait, once authOptions has checked it.
func (nf *natsFlags) wait() time.Duration {
	d, _ := nf.connectWait.get()
	return d
}
