package main_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/auth"
)

// aerie doctor checks the credentials it is given for the command of
// their role: the role named by the seed file, or --role. The right key
// passes; another role's key fails, saying whose it is and what the
// command would miss.
func TestDoctorChecksTheRolesPermissions(t *testing.T) {
	bin, _, addr, key := serverWithRoles(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--nkey", key(auth.Worker)}, 0, "PASS  permissions     user U"},
		{[]string{"--nkey", key(auth.Worker)}, 0, "every permission aerie work needs is granted"},
		{[]string{"--nkey", key(auth.Producer), "--role", "producer"}, 0, "every permission aerie produce needs is granted"},
		{[]string{"--nkey", key(auth.Admin)}, 0, "every permission aerie replay, reconcile and runs needs is granted"},
		{[]string{"--nkey", key(auth.Producer), "--role", "worker"}, 1, "FAIL  permissions     these are the producer's credentials, not the worker's"},
		{[]string{"--nkey", key(auth.Worker), "--role", "aggregator"}, 1, "may not publish aerie.events.>: the aggregator cannot publish throughput events"},
		{[]string{"--nkey", key(auth.Worker), "--role", "janitor"}, 1, `--role: role "janitor" is not known`},
	} {
		p := aerie(t, bin, append([]string{"doctor", "--nats", "nats://" + addr}, tc.args...)...)
		code := p.exit(t, time.Minute)
		out := p.stdout.String() + p.stderr.String()
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("aerie doctor %v: exit %d, want %d and %q in:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

// Every command that connects to NATS finds another role's key at once,
// says whose key it is and which the command needs, instead of waiting
// out request timeouts on an inbox it may not read.
func TestWrongRolesKeyFailsAtOnce(t *testing.T) {
	bin, dir, addr, key := serverWithRoles(t)
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(t, bin, "gen-prompts", "--count", "5", "--out", prompts).wait(t, time.Minute)
	for _, tc := range []struct {
		args      []string
		got, want auth.Role
	}{
		{[]string{"status"}, auth.Worker, auth.Admin},
		{[]string{"runs", "ls"}, auth.Worker, auth.Admin},
		{[]string{"replay", "--run", "r"}, auth.Aggregator, auth.Admin},
		{[]string{"reconcile", "--run", "r", "--prompts", prompts}, auth.Producer, auth.Admin},
		{[]string{"aggregate", "--run", "r", "--data-dir", filepath.Join(dir, "data")}, auth.Worker, auth.Aggregator},
		{[]string{"produce", "--run", "r", "--prompts", prompts, "--model", "m"}, auth.Aggregator, auth.Producer},
		{[]string{"work", "--run", "r", "--backend", "http://" + freeAddr(t)}, auth.Producer, auth.Worker},
	} {
		args := append(append([]string(nil), tc.args...), "--nats", "nats://"+addr, "--nkey", key(tc.got))
		began := time.Now()
		p := aerie(t, bin, args...)
		code := p.exit(t, time.Minute)
		took := time.Since(began)
		msg := p.stderr.String()
		want := "this is the " + string(tc.got) + "'s key, and aerie " + tc.args[0]
		if code != 1 || !strings.Contains(msg, want) || !strings.Contains(msg, "--nkey "+auth.SeedFile(tc.want)) {
			t.Errorf("%v with the %s key: exit %d, want 1 saying %q and --nkey %s:\n%s", tc.args, tc.got, code, want, auth.SeedFile(tc.want), msg)
		}
		if took > 5*time.Second {
			t.Errorf("%v with the %s key took %v to fail", tc.args, tc.got, took.Round(time.Millisecond))
		}
	}
}

// serverWithRoles starts aerie server with role keys in a new directory
// and returns the binary, a directory for the test, the server's address
// and the path of each role's seed.
func serverWithRoles(t *testing.T) (bin, dir, addr string, key func(auth.Role) string) {
	t.Helper()
	bin = buildAerie(t)
	dir = t.TempDir()
	keys := filepath.Join(dir, "keys")
	addr = freeAddr(t)
	start(t, bin, "server", "--listen", addr, "--store", filepath.Join(dir, "nats"), "--auth-dir", keys)
	waitTCP(t, addr)
	return bin, dir, addr, func(r auth.Role) string { return filepath.Join(keys, auth.SeedFile(r)) }
}
