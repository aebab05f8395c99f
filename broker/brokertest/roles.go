package brokertest

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/broker"
)

// StartWithRoles runs a server, like Start, that admits only aerie's four
// roles, each by its nkey seed in the directory it returns and with the
// permissions of package auth. A non-nil change edits a role's
// permissions first (to test a key that lacks something); a non-nil
// tlsConfig makes clients connect over TLS with it.
func StartWithRoles(t testing.TB, change func(auth.Role, *server.Permissions), tlsConfig *tls.Config) (srv *broker.Server, keys string) {
	t.Helper()
	keys = filepath.Join(t.TempDir(), "keys")
	public, err := auth.EnsureDir(keys)
	if err != nil {
		t.Fatal(err)
	}
	users, err := auth.NkeyUsers(public)
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		for i, r := range auth.Roles {
			change(r, users[i].Permissions)
		}
	}
	srv, err = broker.Start(broker.Config{StoreDir: t.TempDir(), Port: -1, SyncInterval: time.Minute, Users: users, TLS: tlsConfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv, keys
}

// RoleOptions are the options of a client holding role key's seed from
// keys and replying on the inbox of role as (the same role, but for tests
// of a key used for another role's command).
func RoleOptions(t testing.TB, keys string, key, as auth.Role) []nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(filepath.Join(keys, auth.SeedFile(key)))
	if err != nil {
		t.Fatal(err)
	}
	return []nats.Option{o, nats.CustomInboxPrefix(auth.InboxPrefix(as))}
}

// FreeAddr is a 127.0.0.1 address with a port free at the time of the
// call, for a server that must be told its port before it starts (a
// cluster's routes name each other's).
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
