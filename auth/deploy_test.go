package auth_test

import (
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/nats-io/nats-server/v2/server"
)

// deployConf is the production configuration shipped in deploy/.
const deployConf = "../deploy/nats-server.conf"

// deploy/nats-server.conf parses as shipped, and again with every
// commented-out part enabled (the users and routes includes written by
// `aerie auth init`, client TLS and route TLS): then every client must be
// a role, every route must present the route secret, and both clients
// and routes use TLS. With nats-server on PATH, `nats-server -t` checks
// both files as well.
func TestDeployConfLoads(t *testing.T) {
	opts, err := server.ProcessConfigFile(deployConf)
	if err != nil {
		t.Fatalf("nats-server rejects %s as shipped: %v", deployConf, err)
	}
	if opts.Cluster.Name != "aerie" || len(opts.Routes) != 3 {
		t.Errorf("shipped cluster %q with %d routes, want aerie with 3", opts.Cluster.Name, len(opts.Routes))
	}
	nodes := []string{"nats-1.example.internal:6222", "nats-2.example.internal:6222", "nats-3.example.internal:6222"}

	dir := t.TempDir()
	keys := filepath.Join(dir, "aerie")
	public, err := auth.EnsureDir(keys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.WriteUsersConf(keys, public); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.WriteRoutesConf(keys, nodes); err != nil {
		t.Fatal(err)
	}
	secret, err := auth.EnsureRouteSecret(keys)
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dir, "tls")
	writeCerts(t, tlsDir)

	shipped, err := os.ReadFile(deployConf)
	if err != nil {
		t.Fatal(err)
	}
	enabled, n := uncomment(string(shipped))
	if n.includes != 2 || n.tlsBlocks != 2 {
		t.Fatalf("found %d commented includes and %d commented tls blocks in %s, want 2 and 2", n.includes, n.tlsBlocks, deployConf)
	}
	enabled = strings.ReplaceAll(enabled, "/etc/nats/tls/", tlsDir+"/")
	enabled = strings.ReplaceAll(enabled, "/var/lib/nats", filepath.Join(dir, "store"))
	conf := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(conf, []byte(enabled), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err = server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server rejects %s with its includes and TLS enabled: %v\n%s", deployConf, err, enabled)
	}
	if len(opts.Nkeys) != len(auth.Roles) {
		t.Errorf("%d nkey users, want %d", len(opts.Nkeys), len(auth.Roles))
	}
	if opts.Cluster.Username != auth.RouteUser || opts.Cluster.Password != secret {
		t.Errorf("routes accepted with user %q (password set: %v), want %q and the route secret",
			opts.Cluster.Username, opts.Cluster.Password != "", auth.RouteUser)
	}
	if len(opts.Routes) != len(nodes) {
		t.Errorf("%d routes, want %d", len(opts.Routes), len(nodes))
	}
	for _, r := range opts.Routes {
		if p, _ := r.User.Password(); r.User.Username() != auth.RouteUser || p != secret {
			t.Errorf("route %s does not present the route secret: the include's routes must replace the plain ones", r.Redacted())
		}
	}
	if opts.TLSConfig == nil || opts.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("client TLS not enabled with verify (tls config %v)", opts.TLSConfig != nil)
	}
	if opts.Cluster.TLSConfig == nil {
		t.Error("route TLS not enabled")
	}

	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Logf("nats-server not on PATH: checked with the server package's parser only (go install github.com/nats-io/nats-server/v2@v2.15.2 for `nats-server -t`)")
		return
	}
	for _, c := range []string{deployConf, conf} {
		if out, err := exec.Command(bin, "-t", "-c", c).CombinedOutput(); err != nil {
			t.Errorf("nats-server -t -c %s: %v\n%s", c, err, out)
		}
	}
}

type uncommented struct{ includes, tlsBlocks int }

// uncomment enables the commented-out includes and tls { } blocks of a
// configuration, as an operator would.
func uncomment(conf string) (string, uncommented) {
	var n uncommented
	lines := strings.Split(conf, "\n")
	inTLS := false
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
		switch {
		case strings.HasPrefix(trimmed, "# include "):
			lines[i] = indent + strings.TrimPrefix(trimmed, "# ")
			n.includes++
		case trimmed == "# tls {":
			lines[i] = indent + "tls {"
			inTLS = true
			n.tlsBlocks++
		case inTLS && strings.HasPrefix(trimmed, "#"):
			lines[i] = indent + strings.TrimPrefix(strings.TrimPrefix(trimmed, "#"), " ")
			if trimmed == "# }" {
				inTLS = false
			}
		}
	}
	return strings.Join(lines, "\n"), n
}

// writeCerts writes a throwaway CA (ca.pem) and the certificates the
// deploy configuration names (server.pem, route.pem and their keys) into
// dir.
func writeCerts(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	pki := brokertest.NewPKI(t)
	copyFile(t, pki.CA, filepath.Join(dir, "ca.pem"))
	for _, name := range []string{"server", "route"} {
		cert, key := pki.Issue(t, name, "nats-1.example.internal", "nats-2.example.internal", "nats-3.example.internal")
		copyFile(t, cert, filepath.Join(dir, name+".pem"))
		copyFile(t, key, filepath.Join(dir, name+"-key.pem"))
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The route secret is made once, private, and reused; a damaged one is
// reported with its path rather than silently replaced (the other nodes
// still hold the old one).
func TestRouteSecret(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	first, err := auth.EnsureRouteSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) < 40 {
		t.Errorf("route secret %d characters, want at least 40", len(first))
	}
	path := filepath.Join(dir, auth.RouteSecretFile)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("route secret file: %v, mode %v, want 0600", err, fi.Mode().Perm())
	}
	second, err := auth.EnsureRouteSecret(dir)
	if err != nil || second != first {
		t.Fatalf("second EnsureRouteSecret = %v, changed %v", err, second != first)
	}
	conf, err := auth.WriteRoutesConf(dir, []string{"a:6222"})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(conf); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("routes.conf: %v, want mode 0600", err)
	}
	if _, err := auth.RoutesConf(first, []string{"no-port"}); err == nil {
		t.Error("a route without a port was accepted")
	}
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.EnsureRouteSecret(dir); err == nil || !strings.Contains(err.Error(), auth.RouteSecretFile) {
		t.Errorf("a damaged route secret: err %v, want one naming %s", err, auth.RouteSecretFile)
	}
}
