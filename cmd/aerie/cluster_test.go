package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/auth"
)

// aerie server refuses a half-given cluster, saying what is missing.
func TestServerClusterFlagErrors(t *testing.T) {
	bin := buildAerie(t)
	base := []string{"server", "--listen", freeAddr(t), "--store", t.TempDir()}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--routes", "nats-route://127.0.0.1:6222"}, "--routes \"nats-route://127.0.0.1:6222\" needs --cluster-listen"},
		{[]string{"--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://127.0.0.1:6222"}, "needs --name"},
		{[]string{"--name", "n1", "--cluster-listen", "127.0.0.1:6222"}, "needs --routes"},
		{[]string{"--name", "n1", "--cluster-listen", "127.0.0.1:6222", "--routes", "127.0.0.1:6222"}, "want nats-route://host:port"},
	} {
		p := aerie(t, bin, append(append([]string(nil), base...), tc.flags...)...)
		code := p.exit(t, time.Minute)
		if code == 0 || !strings.Contains(p.stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr does not say %q:\n%s", tc.flags, code, tc.want, p.stderr.String())
		}
	}
}

// auth init writes the route secret once and routes.conf with the
// secret in every route; a server in a cluster with --auth-dir uses
// that same secret.
func TestAuthInitRoutes(t *testing.T) {
	bin := buildAerie(t)
	keys := filepath.Join(t.TempDir(), "keys")
	aerie(t, bin, "auth", "init", "--out", keys, "--routes", "nats-1:6222,nats-route://nats-2:6222").wait(t, time.Minute)
	secret, err := os.ReadFile(filepath.Join(keys, auth.RouteSecretFile))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile(filepath.Join(keys, auth.RoutesFile))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(secret))
	for _, want := range []string{"nats-route://aerie-route:" + s + "@nats-1:6222", "nats-route://aerie-route:" + s + "@nats-2:6222", `password: "` + s + `"`} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("routes.conf lacks %q:\n%s", want, conf)
		}
	}
	for _, f := range []string{auth.RouteSecretFile, auth.RoutesFile} {
		if fi, err := os.Stat(filepath.Join(keys, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", f, err)
		}
	}

	// Two nodes of one cluster, sharing the auth dir, come up; the
	// secret stays.
	a, b := freeAddr(t), freeAddr(t)
	ra, rb := freeAddr(t), freeAddr(t)
	routes := "nats-route://" + ra + ",nats-route://" + rb
	start(t, bin, "server", "--name", "n1", "--listen", a, "--cluster-listen", ra, "--routes", routes, "--store", t.TempDir(), "--auth-dir", keys)
	start(t, bin, "server", "--name", "n2", "--listen", b, "--cluster-listen", rb, "--routes", routes, "--store", t.TempDir(), "--auth-dir", keys)
	waitTCP(t, a)
	waitTCP(t, b)
	admin := filepath.Join(keys, auth.SeedFile(auth.Admin))
	aerie(t, bin, "runs", "ls", "--nats", "nats://"+b, "--nkey", admin).wait(t, time.Minute)
	if again, _ := os.ReadFile(filepath.Join(keys, auth.RouteSecretFile)); string(again) != string(secret) {
		t.Error("a server replaced the route secret")
	}
}
