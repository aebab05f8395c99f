package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aerie-dev/aerie/broker/brokertest"
	"github.com/aerie-dev/aerie/schema"
)

// aerie status reads a run from the server: once as text or JSON, every
// run without --run, and redrawn with --watch, without clearing a screen
// that is not a terminal, until interrupted.
func TestStatusCommand(t *testing.T) {
	bin := buildAerie(t)
	srv, _, js := brokertest.Provisioned(t)
	brokertest.Queue(t, js, schema.Manifest{Run: "st", Model: "m"}, brokertest.Prompts(4))
	brokertest.Queue(t, js, schema.Manifest{Run: "other", Model: "m"}, brokertest.Prompts(2))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev, _ := json.Marshal(schema.Throughput{Run: "st", Time: time.Now(), Phase: schema.PhaseSteady, Total: 4, Completed: 2, Failed: 1,
		FailedByReason: map[string]int{schema.ReasonPermanent: 1}, ETASec: 70, ETALowSec: 60, ETAHighSec: 95})
	hb, _ := json.Marshal(schema.Heartbeat{Run: "st", Worker: "gpu-a", Host: "gpu-a.example", Backend: "http://127.0.0.1:8000",
		Time: time.Now(), Window: 200, InFlight: 1})
	for subject, data := range map[string][]byte{schema.ThroughputSubject("st"): ev, schema.HeartbeatSubject("st", "gpu-a"): hb} {
		if _, err := js.Publish(ctx, subject, data); err != nil {
			t.Fatal(err)
		}
	}
	url := srv.ClientURL()

	p := aerie(t, bin, "status", "--nats", url, "--run", "st")
	p.wait(t, time.Minute)
	for _, want := range []string{"2 / 4", "1 (permanent 1)", "1m10s (1m00s–1m35s)", "gpu-a.example", "http://127.0.0.1:8000"} {
		if !strings.Contains(p.stdout.String(), want) {
			t.Errorf("aerie status lacks %q:\n%s", want, p.stdout.String())
		}
	}

	p = aerie(t, bin, "status", "--nats", url, "--run", "st", "--json")
	p.wait(t, time.Minute)
	var doc struct {
		Completed      int            `json:"completed"`
		FailedByReason map[string]int `json:"failed_by_reason"`
		Workers        []struct {
			Host string `json:"host"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(p.stdout.Bytes(), &doc); err != nil || doc.Completed != 2 ||
		doc.FailedByReason[schema.ReasonPermanent] != 1 || len(doc.Workers) != 1 || doc.Workers[0].Host != "gpu-a.example" {
		t.Errorf("aerie status --json: %v %+v\n%s", err, doc, p.stdout.String())
	}

	p = aerie(t, bin, "status", "--nats", url)
	p.wait(t, time.Minute)
	if out := p.stdout.String(); !strings.Contains(out, "st ") || !strings.Contains(out, "other ") || !strings.Contains(out, "2/4") {
		t.Errorf("aerie status without --run:\n%s", out)
	}

	p = aerie(t, bin, "status", "--nats", url, "--run", "missing")
	if code := p.exit(t, time.Minute); code != 1 || !strings.Contains(p.stderr.String(), "no manifest") {
		t.Errorf("aerie status of a missing run: exit %d\n%s", code, p.stderr.String())
	}

	// --watch to a file: frames follow one another, no screen clearing.
	out, err := os.Create(filepath.Join(t.TempDir(), "watch.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(bin, "status", "--nats", url, "--run", "st", "--watch", "--interval", "50ms")
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	frames := func() string { b, _ := os.ReadFile(out.Name()); return string(b) }
	brokertest.Eventually(t, 30*time.Second, func() bool { return strings.Count(frames(), "WORKER") >= 3 }, "three frames")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("aerie status --watch after Ctrl-C: %v", err)
	}
	if strings.Contains(frames(), "\x1b[") {
		t.Errorf("--watch cleared a screen that is a file:\n%q", frames())
	}
}
