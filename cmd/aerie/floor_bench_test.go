package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkBrokerFloor measures what the NATS server spends per message
// on the operations every prompt needs, with NATS's own benchmark tool
// (`nats bench`) instead of aerie, against `aerie server` (every write
// fsynced, as in BenchmarkCPUPerPrompt): storing a message in an atomic
// batch of 10, 100 and 500 messages (prompts of 300 bytes, answers of
// 1 KB), and delivering a stored message to a pull consumer that
// acknowledges it, plainly and with a confirmed (double) ack. A prompt
// is stored once and its answer once, and each is delivered and
// acknowledged once, so the sum of those four is the least any client
// storing both durably costs the server per prompt. The server's CPU is
// read from /proc around each step.
//
// It needs the nats CLI: bin/tools/nats (`make natscli`) or nats on
// PATH; without it the benchmark is skipped. AERIE_FLOOR_MSGS sets the
// messages per step (default 30,000).
func BenchmarkBrokerFloor(b *testing.B) {
	natsCLI := findNatsCLI(b)
	n := 30000
	if v := os.Getenv("AERIE_FLOOR_MSGS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("AERIE_FLOOR_MSGS=%q: want a count of at least 1000", v)
		}
	}
	bin := buildAerie(b)
	figures := map[string][]float64{}
	for i := 0; b.Loop(); i++ {
		addr := freeAddr(b)
		server := start(b, bin, "server", "--listen", addr, "--store", filepath.Join(b.TempDir(), "nats"))
		waitTCP(b, addr)
		url := "nats://" + addr
		nats := func(args ...string) {
			b.Helper()
			cmd := exec.Command(natsCLI, append([]string{"-s", url}, args...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("nats %v: %v\n%s", args, err, out)
			}
		}
		// perMsg is the server's CPU per message, in µs, for one step.
		perMsg := func(step func()) float64 {
			before := procCPU(b, server)
			step()
			return float64((procCPU(b, server) - before).Microseconds()) / float64(n)
		}
		msgs := strconv.Itoa(n)
		line := fmt.Sprintf("iteration %d, µs of server CPU per message:", i+1)
		for _, size := range []string{"300B", "1KB"} {
			for _, batch := range []int{10, 100, 500} {
				_ = exec.Command(natsCLI, "-s", url, "stream", "rm", "-f", "benchstream").Run()
				v := perMsg(func() {
					nats("bench", "js", "pub", "atomic", "--no-progress", "--create", "--storage", "file",
						"--msgs", msgs, "--size", size, "--batch", strconv.Itoa(batch),
						"--multisubject", "--multisubjectmax", "0", "floor.stored")
				})
				key := fmt.Sprintf("store-%s-batch%d-µs/msg", size, batch)
				figures[key] = append(figures[key], v)
				line += fmt.Sprintf(" store %s in batches of %d %.0f;", size, batch, v)
			}
		}
		for _, c := range []struct{ name, flag string }{{"ack", "--no-doubleack"}, {"double-ack", "--doubleack"}} {
			nats("consumer", "add", "benchstream", c.name, "--pull", "--ack", "explicit", "--deliver", "all", "--defaults")
			v := perMsg(func() {
				nats("bench", "js", "fetch", "--no-progress", "--msgs", msgs, "--batch", "200", "--acks", "explicit", c.flag, "--consumer", c.name)
			})
			key := "deliver-" + c.name + "-µs/msg"
			figures[key] = append(figures[key], v)
			line += fmt.Sprintf(" deliver and %s %.0f;", c.name, v)
		}
		b.Log(line)
		_ = server.cmd.Process.Kill()
		<-waitDone(server)
	}
	medians := map[string]float64{}
	for key, vs := range figures {
		slices.Sort(vs)
		medians[key] = vs[len(vs)/2]
		b.ReportMetric(medians[key], key)
	}
	for _, batch := range []int{10, 100, 500} {
		floor := medians[fmt.Sprintf("store-300B-batch%d-µs/msg", batch)] + medians[fmt.Sprintf("store-1KB-batch%d-µs/msg", batch)] +
			2*medians["deliver-ack-µs/msg"]
		b.ReportMetric(floor, fmt.Sprintf("floor-batch%d-µs/prompt", batch))
	}
}

// waitDone is a channel closed once p has exited, leaving its result for
// the test's cleanup.
func waitDone(p *proc) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		select {
		case err := <-p.done:
			p.done <- err
		case <-time.After(30 * time.Second):
		}
		close(ch)
	}()
	return ch
}
