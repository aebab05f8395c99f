package check

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
)

// rehearsalPrompts is the demo's prompt count in the rehearsals, set
// through AERIE_DEMO_PROMPTS as a user would.
const rehearsalPrompts = 200

// TestComposeRehearsal runs the compose demo as `docker compose up`
// would, without a container engine: the nats service from nats.conf
// and the users.conf the auth service writes, and every aerie service's
// command and environment (as compose-go resolves them) in the order its
// depends_on conditions give, each named volume a directory. The run must
// complete: the aggregator exits 0 with one line per prompt, both workers
// answered, and the NATS server refused nobody anything.
func TestComposeRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compose demo")
	}
	p := loadComposeEnv(t, types.Mapping{
		"AERIE_DEMO_PROMPTS": strconv.Itoa(rehearsalPrompts),
		"AERIE_SIM_SPEED":    "20000",
	})
	imageEnv, entrypoint := imageConfig(t)
	if !slices.Equal(entrypoint, []string{"/aerie"}) {
		t.Fatalf("Dockerfile: ENTRYPOINT %v: the rehearsal runs a service's command as aerie's arguments", entrypoint)
	}
	aerieBinary(t)

	volumes := map[string]string{}
	for name := range p.Volumes {
		volumes[name] = t.TempDir()
	}
	containers := map[string]*container{}
	for name, s := range p.Services {
		mounts := map[string]string{}
		for _, v := range s.Volumes {
			switch v.Type {
			case types.VolumeTypeVolume:
				dir, ok := volumes[v.Source]
				if !ok {
					t.Fatalf("%s: volume %s is not declared", name, v.Source)
				}
				mounts[v.Target] = dir
			case types.VolumeTypeBind:
				mounts[v.Target] = v.Source
			default:
				t.Fatalf("%s: volume %+v: only named volumes and bind mounts are rehearsed", name, v)
			}
		}
		containers[name] = newContainer(t, mounts)
	}

	type state struct {
		started, healthy, done chan struct{}
		ok                     bool
		proc                   *proc
	}
	states := map[string]*state{}
	for name := range p.Services {
		states[name] = &state{started: make(chan struct{}), healthy: make(chan struct{}), done: make(chan struct{})}
	}
	ctx, cancel := context.WithTimeout(context.Background(), rehearsalTimeout)
	defer cancel()
	// A service that fails ends the rehearsal: compose would restart
	// it (or leave its dependents waiting), and the run cannot complete.
	failed := make(chan string, len(p.Services))
	var (
		h       hosts
		natsLog *natsLog
		beats   *heartbeats
		wg      sync.WaitGroup
	)
	for name, s := range p.Services {
		st, c := states[name], containers[name]
		wg.Add(1)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Errorf(format, args...)
			failed <- name
		}
		go func() {
			defer wg.Done()
			defer close(st.done)
			for dep, d := range s.DependsOn {
				ds := states[dep]
				var ready chan struct{}
				switch d.Condition {
				case types.ServiceConditionCompletedSuccessfully:
					ready = ds.done
				case types.ServiceConditionHealthy:
					ready = ds.healthy
				case types.ServiceConditionStarted:
					ready = ds.started
				default:
					t.Errorf("%s: depends_on %s: condition %q is not rehearsed", name, dep, d.Condition)
					return
				}
				select {
				case <-ready:
				case <-ctx.Done():
					return
				}
				if d.Condition == types.ServiceConditionCompletedSuccessfully && !ds.ok {
					t.Errorf("%s: not started: %s did not complete successfully", name, dep)
					failed <- name
					return
				}
			}
			if name == "nats" {
				// The official image's entrypoint is nats-server; its
				// command here is -c <conf>.
				conf := flagValue(s.Command, "-c")
				if conf == "" {
					fail("nats: command %v has no -c", s.Command)
					return
				}
				srv, log, clientPort, httpPort, err := startNATS(t, c.path(conf), c.path)
				if err != nil {
					fail("nats: %v", err)
					return
				}
				natsLog = log
				h.set(name, clientPort, srv.Addr().String())
				close(st.started)
				if s.HealthCheck != nil {
					// The health check runs inside the container, where
					// the monitoring port is on 127.0.0.1.
					var local hosts
					local.set("127.0.0.1", httpPort, srv.MonitorAddr().String())
					url := ""
					for _, a := range s.HealthCheck.Test {
						if strings.HasPrefix(a, "http://") {
							url = local.rewrite(a)
						}
					}
					if url == "" {
						fail("nats: health check %v fetches no URL", s.HealthCheck.Test)
						return
					}
					if err := waitHTTP(ctx, url); err != nil {
						fail("nats: health check: %v", err)
						return
					}
				}
				// Watching before any worker starts, so that every
				// worker's first heartbeat is heard.
				seed := filepath.Join(volumes["aerie-auth"], "admin.nk")
				if beats, err = watchHeartbeats(t, "nats://"+srv.Addr().String(), seed); err != nil {
					fail("nats: %v", err)
					return
				}
				close(st.healthy)
				<-ctx.Done()
				st.ok = true
				return
			}
			env := map[string]string{}
			for k, v := range imageEnv {
				env[k] = v
			}
			for k, v := range s.Environment {
				if v != nil {
					env[k] = *v
				}
			}
			pr := runAerie(t, ctx, name, c, s.Command, env, &h)
			st.proc = pr
			// Inside its own container a server is 127.0.0.1:<port>, which
			// is where its health check asks.
			var local hosts
			if listen := flagValue(s.Command, "--listen"); listen != "" {
				_, port, _ := strings.Cut(listen, ":")
				n, err := strconv.Atoi(port)
				if err != nil {
					t.Errorf("%s: --listen %s: no port", name, listen)
					return
				}
				select {
				case addr := <-pr.listen:
					h.set(name, n, addr)
					local.set("127.0.0.1", n, addr)
				case <-pr.done:
					t.Errorf("%s: exited before serving: %v", name, pr.err)
					return
				case <-ctx.Done():
					return
				}
			}
			close(st.started)
			if s.HealthCheck != nil {
				if err := aerieHealthCheck(t, ctx, name, c, s.HealthCheck, env, &local); err != nil {
					fail("%s: %v", name, err)
					return
				}
			}
			close(st.healthy)
			<-pr.done
			st.ok = pr.err == nil
			if !st.ok && ctx.Err() == nil {
				t.Errorf("%s: aerie %s: %v\n%s", name, strings.Join(s.Command, " "), pr.err, lastLines(pr.out.String(), 5))
				failed <- name
			}
		}()
	}

	agg := states["aggregator"]
	select {
	case <-agg.done:
	case <-failed:
	case <-ctx.Done():
		t.Errorf("the aggregator did not exit within %v", rehearsalTimeout)
		for _, name := range sorted(p.ServiceNames()) {
			if pr := states[name].proc; pr != nil {
				t.Logf("%s, last lines:\n%s", name, lastLines(pr.out.String(), 3))
			}
		}
	}
	cancel()
	wg.Wait()
	for _, name := range sorted(p.ServiceNames()) {
		if pr := states[name].proc; pr != nil && testing.Verbose() {
			t.Logf("%s (exit: %v):\n%s", name, pr.err, pr.out.String())
		}
	}
	checkViolations(t, natsLog)
	if !agg.ok {
		t.FailNow()
	}

	aggSvc := p.Services["aggregator"]
	out := filepath.Join(containers["aggregator"].path(flagValue(aggSvc.Command, "--data-dir")), flagValue(aggSvc.Command, "--run"), "completions.jsonl")
	lines, workers := completions(t, out)
	if lines != rehearsalPrompts {
		t.Errorf("completions.jsonl: %d lines, want one per prompt (%d)", lines, rehearsalPrompts)
	}
	// Both workers ran: each heartbeats from its start. Which of them
	// answers is up to JetStream (one window may take every prompt).
	if beats != nil && len(beats.names()) != 2 {
		t.Errorf("heartbeats from workers %v, want both workers", beats.names())
	}
	for w := range workers {
		if beats != nil && !slices.Contains(beats.names(), w) {
			t.Errorf("completions.jsonl: answers by %s, which sent no heartbeat", w)
		}
	}
}

func checkViolations(t *testing.T, log *natsLog) {
	t.Helper()
	if log == nil {
		t.Error("the NATS server did not start")
		return
	}
	for _, v := range log.violations() {
		t.Errorf("NATS server: %s", v)
	}
}

// aerieHealthCheck runs an aerie service's health check, a command of the
// image's own binary, as compose would: every interval until it exits 0,
// at most retries times.
func aerieHealthCheck(t *testing.T, ctx context.Context, name string, c *container, hc *types.HealthCheckConfig, env map[string]string, local *hosts) error {
	t.Helper()
	test := hc.Test
	if len(test) < 2 || test[0] != "CMD" || test[1] != "/aerie" {
		return fmt.Errorf("health check %v: only [CMD /aerie ...] is rehearsed (the image has no shell)", test)
	}
	interval, retries := 30*time.Second, uint64(3) // compose's defaults
	if hc.Interval != nil {
		interval = time.Duration(*hc.Interval)
	}
	if hc.Retries != nil {
		retries = *hc.Retries
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last string
	for try := uint64(0); try < retries; try++ {
		pr := runAerie(t, ctx, name+" health check", c, test[2:], env, local)
		<-pr.done
		if pr.err == nil {
			return nil
		}
		last = lastLines(pr.out.String(), 3)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("health check %v failed %d times; last:\n%s", test, retries, last)
}
