package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/simulator/simtest"
)

// Each command runs with its own role's nkey, over mutual TLS, against
// aerie server --auth-dir, and a small run completes under --turns last and --turns
// all without a single permissions violation on the server.
func TestRolesRunThePipeline(t *testing.T) {
	bin := buildAerie(t)
	for _, turns := range []string{"last", "all"} {
		t.Run(turns, func(t *testing.T) {
			const n = 40
			dir := t.TempDir()
			prompts := filepath.Join(dir, "conversations.jsonl")
			conversationsFile(t, prompts, n)
			sim := simtest.Serve(t, simulator.Config{Speed: 400, OutputMedian: 100, MaxNumSeqs: 64})
			natsAddr := freeAddr(t)
			natsURL := "nats://" + natsAddr
			data := filepath.Join(dir, "data")
			keys := filepath.Join(dir, "keys")
			run := "roles"
			pki := newTestPKI(t)
			tlsFlags := []string{"--tls-ca", pki.ca, "--tls-cert", pki.clientCert, "--tls-key", pki.clientKey}
			with := func(args ...string) []string { return append(args, tlsFlags...) }

			serverLog := filepath.Join(dir, "server.log")
			lf, err := os.Create(serverLog)
			if err != nil {
				t.Fatal(err)
			}
			srv := exec.Command(bin, "server", "--listen", natsAddr, "--store", filepath.Join(data, "nats"), "--auth-dir", keys,
				"--tls-cert", pki.serverCert, "--tls-key", pki.serverKey, "--tls-ca", pki.ca)
			srv.Stdout, srv.Stderr = lf, lf
			srv.Env = append(os.Environ(), "AERIE_LOG_LEVEL=warn")
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			stopped := false
			stop := func() {
				if !stopped {
					stopped = true
					_ = srv.Process.Signal(syscall.SIGTERM)
					_ = srv.Wait()
					lf.Close()
				}
			}
			t.Cleanup(stop)
			waitTCP(t, natsAddr)
			for _, r := range auth.Roles {
				fi, err := os.Stat(filepath.Join(keys, auth.SeedFile(r)))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o600 {
					t.Errorf("%s seed has mode %v, want 0600", r, fi.Mode().Perm())
				}
			}
			key := func(r auth.Role) string { return filepath.Join(keys, auth.SeedFile(r)) }

			for _, name := range []string{"w1", "w2"} {
				start(t, bin, with("work", "--nats", natsURL, "--nkey", key(auth.Worker), "--run", run, "--backend", sim, "--window", "20", "--name", name, "--grace", "2s")...)
			}
			agg := start(t, bin, with("aggregate", "--nats", natsURL, "--nkey", key(auth.Aggregator), "--run", run, "--data-dir", data, "--exit-when-done", "--event-interval", "500ms")...)
			aerie(t, bin, with("produce", "--nats", natsURL, "--nkey", key(auth.Producer), "--run", run, "--prompts", prompts,
				"--model", "moonshotai/Kimi-K2.5", "--turns", turns, "--max-tokens", "2048", "--ack-wait", "3s")...).wait(t, 2*time.Minute)
			agg.wait(t, 3*time.Minute)
			if got := countLines(filepath.Join(data, run, "completions.jsonl")); got != n {
				t.Errorf("completions.jsonl has %d lines, want %d", got, n)
			}
			// The admin key lists the runs.
			ls := aerie(t, bin, with("runs", "ls", "--nats", natsURL, "--nkey", key(auth.Admin))...)
			ls.wait(t, time.Minute)
			if !strings.Contains(ls.stdout.String(), run) {
				t.Errorf("runs ls with the admin key said: %s", ls.stdout.String())
			}
			// Without the client certificate, or without trusting the CA,
			// the admin key alone does not get in.
			for _, flags := range [][]string{{"--tls-ca", pki.ca}, nil} {
				p := aerie(t, bin, append([]string{"runs", "ls", "--nats", natsURL, "--nkey", key(auth.Admin)}, flags...)...)
				select {
				case err := <-p.done:
					p.done <- err
					if err == nil {
						t.Errorf("runs ls with TLS flags %v connected", flags)
					}
				case <-time.After(time.Minute):
					t.Fatalf("runs ls with TLS flags %v did not end", flags)
				}
			}
			stop()
			b, err := os.ReadFile(serverLog)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "Permissions Violation") {
					t.Errorf("server: %s", line)
				}
			}
		})
	}
}

// aerie auth init writes the seeds and users.conf once and keeps the
// seeds on a second run; a client without a key is refused by aerie
// server --auth-dir, which reuses the same seeds.
func TestAuthInitAndServerAuthDir(t *testing.T) {
	bin := buildAerie(t)
	keys := filepath.Join(t.TempDir(), "keys")
	aerie(t, bin, "auth", "init", "--out", keys).wait(t, time.Minute)
	seed := func() string {
		b, err := os.ReadFile(filepath.Join(keys, auth.SeedFile(auth.Worker)))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := seed()
	conf, err := os.ReadFile(filepath.Join(keys, auth.UsersFile))
	if err != nil || !strings.Contains(string(conf), "authorization {") {
		t.Fatalf("users.conf: %v\n%s", err, conf)
	}
	aerie(t, bin, "auth", "init", "--out", keys).wait(t, time.Minute)
	natsAddr := freeAddr(t)
	start(t, bin, "server", "--listen", natsAddr, "--store", t.TempDir(), "--auth-dir", keys)
	waitTCP(t, natsAddr)
	if seed() != before {
		t.Fatal("a second auth init or the server replaced the worker's seed")
	}
	p := aerie(t, bin, "runs", "ls", "--nats", "nats://"+natsAddr)
	select {
	case err := <-p.done:
		p.done <- err
		if err == nil || !strings.Contains(strings.ToLower(p.stderr.String()), "authorization violation") {
			t.Fatalf("runs ls without a key: err %v, stderr %s", err, p.stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("runs ls without a key did not end")
	}
	ok := aerie(t, bin, "runs", "ls", "--nats", "nats://"+natsAddr, "--nkey", filepath.Join(keys, auth.SeedFile(auth.Admin)))
	ok.wait(t, time.Minute)

	// A server on a new directory says that it created the seeds, and where.
	fresh := filepath.Join(t.TempDir(), "new-keys")
	addr := freeAddr(t)
	srv := startEnv(t, bin, []string{"AERIE_LOG_LEVEL=info"}, "server", "--listen", addr, "--store", t.TempDir(), "--auth-dir", fresh)
	waitTCP(t, addr)
	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	<-waitDone(srv)
	log := srv.stderr.String()
	if !strings.Contains(log, "created=producer,worker,aggregator,admin") {
		t.Errorf("the server does not say it created the seeds:\n%s", log)
	}
	for _, r := range auth.Roles {
		if path := filepath.Join(fresh, auth.SeedFile(r)); !strings.Contains(log, path) {
			t.Errorf("the server does not say where the %s seed is (%s):\n%s", r, path, log)
		}
	}
}
