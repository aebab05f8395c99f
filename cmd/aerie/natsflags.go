package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/natsdial"
)

// natsFlags are the connection flags of every command that talks to NATS.
// role is the aerie role the command plays: its replies arrive below
// that role's inbox prefix, the only one a server enforcing the roles lets
// it subscribe to.
type natsFlags struct {
	url, creds, nkey string
	tlsCA, tlsCert   string
	tlsKey           string
	role             auth.Role
	// connectWait is how long the command waits at start-up for a
	// server that does not answer (0: it fails at once).
	connectWait *waitFlag
}

func addNATSFlags(fs *flag.FlagSet, role auth.Role) *natsFlags {
	nf := &natsFlags{role: role}
	fs.StringVar(&nf.url, "nats", envOr("AERIE_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma separated (env AERIE_NATS_URL)")
	fs.StringVar(&nf.creds, "creds", os.Getenv("AERIE_NATS_CREDS"), "NATS credentials file (env AERIE_NATS_CREDS)")
	fs.StringVar(&nf.nkey, "nkey", os.Getenv("AERIE_NATS_NKEY"), "NATS user nkey seed file of this command's role, "+string(role)+" (env AERIE_NATS_NKEY; aerie server --auth-dir and aerie auth init write them)")
	fs.StringVar(&nf.tlsCA, "tls-ca", os.Getenv("AERIE_NATS_TLS_CA"), "PEM CA bundle that signed the NATS server's certificate (env AERIE_NATS_TLS_CA)")
	fs.StringVar(&nf.tlsCert, "tls-cert", os.Getenv("AERIE_NATS_TLS_CERT"), "PEM client certificate, for a server that requires mutual TLS (env AERIE_NATS_TLS_CERT)")
	fs.StringVar(&nf.tlsKey, "tls-key", os.Getenv("AERIE_NATS_TLS_KEY"), "PEM private key of --tls-cert (env AERIE_NATS_TLS_KEY)")
	nf.connectWait = addWaitFlag(fs, "connect-wait", "AERIE_CONNECT_WAIT", natsdial.DefaultWait,
		"how long to wait at start-up for a NATS server that does not answer yet, trying again with a back-off and saying so every 10 s; 0 fails at once")
	return nf
}

// waitFlag is a duration flag of how long to wait for something, whose
// default an environment variable may set.
type waitFlag struct {
	name string
	d    time.Duration
	// envErr is why the environment variable could not be read:
	// reported by get, when the command starts.
	envErr error
}

// addWaitFlag declares --name, defaulting to the duration in the
// environment variable env, then def.
func addWaitFlag(fs *flag.FlagSet, name, env string, def time.Duration, help string) *waitFlag {
	w := &waitFlag{name: name}
	if v := os.Getenv(env); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			def = d
		} else {
			w.envErr = fmt.Errorf("%s=%q is not a duration such as %s or 0", env, v, def)
		}
	}
	fs.DurationVar(&w.d, name, def, help+" (env "+env+")")
	return w
}

// get returns the wait, or what is wrong with it.
func (w *waitFlag) get() (time.Duration, error) {
	if w.envErr != nil {
		return 0, w.envErr
	}
	if w.d < 0 {
		return 0, fmt.Errorf("--%s %s: want 0 or more (0: do not wait)", w.name, w.d)
	}
	return w.d, nil
}
