package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuPrompts is the size of BenchmarkCPUPerPrompt's run: AERIE_CPU_PROMPTS,
// or 10,000.
func cpuPrompts() int {
	if n, err := strconv.Atoi(os.Getenv("AERIE_CPU_PROMPTS")); err == nil && n > 0 {
		return n
	}
	return 10000
}

// cpuAnswerTokens is the median answer length of BenchmarkCPUPerPrompt's
// run: AERIE_CPU_ANSWER_TOKENS, or 50. Measured at two lengths, the
// figures split into a cost per prompt and a cost per token streamed.
func cpuAnswerTokens() int {
	if n, err := strconv.Atoi(os.Getenv("AERIE_CPU_ANSWER_TOKENS")); err == nil && n > 0 {
		return n
	}
	return 50
}

// cpuWindow is the worker's --window in BenchmarkCPUPerPrompt:
// AERIE_CPU_WINDOW, or 200, the window the plain client keeps too.
func cpuWindow() string {
	if n, err := strconv.Atoi(os.Getenv("AERIE_CPU_WINDOW")); err == nil && n > 0 {
		return strconv.Itoa(n)
	}
	return "200"
}

// BenchmarkCPUPerPrompt measures the control plane's CPU per prompt, the
// figure that matters at a large scale, process by process. One run of
// cpuPrompts prompts (answers of cpuAnswerTokens tokens) goes through every role
// in its own process, as in production: the NATS server (aerie server,
// fsyncing every write), one worker with a window of 200, the aggregator
// and the producer, against a backend made nearly free (aerie sim at
// 100,000 times real speed), which is measured too. Beside it, against
// the same backend, a plain client in its own process does a worker's
// work without aerie: 200 streams at once, every chunk decoded, each
// answer appended to a JSON Lines file. Each process's CPU (user and
// system) comes from /proc while it runs and from its rusage once it has
// exited; the long-running ones count only what the run cost them.
//
// With AERIE_CPU_PROFILE_DIR set, each aerie process writes a CPU profile
// there (AERIE_CPU_PROFILE), <role>-<iteration>.pprof, for go tool pprof.
func BenchmarkCPUPerPrompt(b *testing.B) {
	bin := buildAerie(b)
	n := cpuPrompts()
	dir := b.TempDir()
	prompts := filepath.Join(dir, "prompts.jsonl")
	aerie(b, bin, "gen-prompts", "--count", strconv.Itoa(n), "--out", prompts).wait(b, time.Minute)
	figures := map[string][]float64{} // by metric, one per iteration
	for i := 0; b.Loop(); i++ {
		profile := func(role string) []string {
			if d := os.Getenv("AERIE_CPU_PROFILE_DIR"); d != "" {
				return []string{"AERIE_CPU_PROFILE=" + filepath.Join(d, fmt.Sprintf("%s-%d.pprof", role, i))}
			}
			return nil
		}
		simAddr := freeAddr(b)
		sim := start(b, bin, "sim", "--listen", simAddr, "--speed", "100000", "--output-median", strconv.Itoa(cpuAnswerTokens()), "--output-sigma", "0.3", "--max-num-seqs", "1024")
		waitTCP(b, simAddr)
		backend := "http://" + simAddr

		// The plain client first, alone on the machine.
		simBefore := procCPU(b, sim)
		plainBegan := time.Now()
		plain := plainClientCPU(b, backend, prompts, filepath.Join(dir, fmt.Sprintf("plain-%d.jsonl", i)))
		plainWall := time.Since(plainBegan)
		simPlain := procCPU(b, sim) - simBefore

		natsAddr := freeAddr(b)
		natsURL := "nats://" + natsAddr
		data := filepath.Join(dir, fmt.Sprintf("data-%d", i))
		server := startEnv(b, bin, profile("nats"), "server", "--listen", natsAddr, "--store", filepath.Join(data, "nats"))
		waitTCP(b, natsAddr)
		run := fmt.Sprintf("cpu%d", i)
		// At info level the worker and the producer say how they batched.
		info := func(env []string) []string { return append(env, "AERIE_LOG_LEVEL=info") }
		work := startEnv(b, bin, info(profile("worker")), "work", "--nats", natsURL, "--run", run, "--backend", backend, "--window", cpuWindow(), "--name", "w", "--grace", "2s")

		serverBefore, workBefore, simBefore := procCPU(b, server), procCPU(b, work), procCPU(b, sim)
		began := time.Now()
		agg := aerieEnv(b, bin, profile("aggregator"), "aggregate", "--nats", natsURL, "--run", run, "--data-dir", data, "--exit-when-done", "--event-interval", "1s")
		prod := aerieEnv(b, bin, info(profile("producer")), "produce", "--nats", natsURL, "--run", run, "--prompts", prompts, "--model", "moonshotai/Kimi-K2.5")
		prod.wait(b, 10*time.Minute)
		agg.wait(b, 10*time.Minute)
		wall := time.Since(began)
		cpu := map[string]time.Duration{
			"worker":     procCPU(b, work) - workBefore,
			"NATS":       procCPU(b, server) - serverBefore,
			"aggregator": exitedCPU(agg),
			"producer":   exitedCPU(prod),
		}
		backendAerie := procCPU(b, sim) - simBefore
		// The worker says at its end how its results were group-committed.
		_ = work.cmd.Process.Signal(syscall.SIGTERM)
		<-waitDone(work)
		batching := fmt.Sprintf("prompts in batches of %s, results in batches of %s",
			meanBatch(prod.stderr.String(), "prompts", "batches"), meanBatch(work.stderr.String(), "results", "result_batches"))
		var total time.Duration
		for _, d := range cpu {
			total += d
		}
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
		b.Logf("%d prompts in %.2fs (%.0f prompts/s; the plain client %.2fs, %.0f prompts/s); µs of CPU per prompt: worker %.0f, NATS %.0f, aggregator %.0f, producer %.0f; aerie and NATS %.0f; plain client %.0f (%.2fx); backend %.0f for aerie, %.0f for the plain client; %s",
			n, wall.Seconds(), float64(n)/wall.Seconds(), plainWall.Seconds(), float64(n)/plainWall.Seconds(),
			per(cpu["worker"]), per(cpu["NATS"]), per(cpu["aggregator"]), per(cpu["producer"]),
			per(total), per(plain), per(total)/per(plain), per(backendAerie), per(simPlain), batching)
		for metric, v := range map[string]float64{
			"worker-µs/prompt": per(cpu["worker"]), "nats-µs/prompt": per(cpu["NATS"]),
			"aggregator-µs/prompt": per(cpu["aggregator"]), "producer-µs/prompt": per(cpu["producer"]),
			"aerie+nats-µs/prompt": per(total), "plain-µs/prompt": per(plain), "aerie/plain-cpu": per(total) / per(plain),
			"prompts/s": float64(n) / wall.Seconds(), "plain-prompts/s": float64(n) / plainWall.Seconds(),
		} {
			figures[metric] = append(figures[metric], v)
		}
	}
	for metric, vs := range figures {
		slices.Sort(vs)
		b.ReportMetric(vs[len(vs)/2], metric)
	}
}

// meanBatch reads the "group commit: stored in batches" line of a log and
// returns the mean batch size, msgs over batches, with both counts; "?"
// without the line.
func meanBatch(log, msgs, batches string) string {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "group commit") {
			continue
		}
		var m, n float64
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case msgs:
				m, _ = strconv.ParseFloat(v, 64)
			case batches:
				n, _ = strconv.ParseFloat(v, 64)
			}
		}
		if n == 0 {
			return fmt.Sprintf("none (%.0f stored alone or in batches)", m)
		}
		return fmt.Sprintf("%.1f (%.0f in %.0f)", m/n, m, n)
	}
	return "?"
}

// procCPU is the CPU time (user and system, every thread) that the
// running process p has used so far, from /proc/<pid>/stat.
func procCPU(b *testing.B, p *proc) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		b.Fatalf("read the CPU time of %v: %v", p.cmd.Args, err)
	}
	// The command name (field 2) may hold spaces; the fields counted
	// start after its closing parenthesis: utime and stime are 14 and 15.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ticks := func(i int) int64 { v, _ := strconv.ParseInt(fields[i-3], 10, 64); return v }
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ticks(14)+ticks(15)) * time.Second / hz
}

// exitedCPU is the CPU time of a process that has exited.
func exitedCPU(p *proc) time.Duration {
	st := p.cmd.ProcessState
	return st.UserTime() + st.SystemTime()
}

// plainClientEnv carries the plain client's arguments to the test binary
// run as a process of its own: backend URL, prompts file, output file.
const plainClientEnv = "AERIE_BENCH_PLAIN_CLIENT"

// plainClientCPU runs the plain client on prompts against backend in a
// process of its own and returns its CPU time.
func plainClientCPU(b *testing.B, backend, prompts, out string) time.Duration {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), plainClientEnv+"="+strings.Join([]string{backend, prompts, out}, "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("plain client: %v\n%s", err, stderr.String())
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// runPlainClient is the plain client's process: what a worker does for
// each prompt, without aerie. It reads every prompt of the file, sends
// each as a streamed chat request with 200 in flight on one HTTP client,
// decodes every chunk of the stream, and appends each answer as a JSON
// line to the output file, synced at the end.
func runPlainClient(args string) error {
	parts := strings.Split(args, "\n")
	if len(parts) != 3 {
		return fmt.Errorf("%s: want backend, prompts and output, got %q", plainClientEnv, args)
	}
	backend, promptsFile, outFile := parts[0], parts[1], parts[2]
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type prompt struct {
		ID       string    `json:"id"`
		Messages []message `json:"messages"`
	}
	in, err := os.Open(promptsFile)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(outFile)
	if err != nil {
		return err
	}
	defer out.Close()
	w := bufio.NewWriter(out)
	var mu sync.Mutex
	const inFlight = 200
	tr := &http.Transport{MaxIdleConns: inFlight, MaxIdleConnsPerHost: inFlight}
	client := &http.Client{Transport: tr}
	next := make(chan prompt)
	errs := make(chan error, inFlight)
	var wg sync.WaitGroup
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				body, _ := json.Marshal(map[string]any{"model": "moonshotai/Kimi-K2.5", "messages": p.Messages, "stream": true,
					"stream_options": map[string]any{"include_usage": true}})
				resp, err := client.Post(backend+"/v1/chat/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				var content, reasoning strings.Builder
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(make([]byte, 64<<10), 8<<20)
				for sc.Scan() {
					data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
					if !ok || bytes.Equal(data, []byte("[DONE]")) {
						continue
					}
					var chunk struct {
						Choices []struct {
							Delta struct {
								Content   string `json:"content"`
								Reasoning string `json:"reasoning"`
							} `json:"delta"`
						} `json:"choices"`
					}
					if err := json.Unmarshal(data, &chunk); err != nil {
						errs <- err
						return
					}
					for _, c := range chunk.Choices {
						content.WriteString(c.Delta.Content)
						reasoning.WriteString(c.Delta.Reasoning)
					}
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				line, _ := json.Marshal(map[string]string{"id": p.ID, "reasoning": reasoning.String(), "content": content.String()})
				mu.Lock()
				w.Write(line)
				w.WriteByte('\n')
				mu.Unlock()
			}
		}()
	}
	dec := json.NewDecoder(in)
	for {
		var p prompt
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			close(next)
			return err
		}
		select {
		case next <- p:
		case err := <-errs:
			close(next)
			return err
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Sync()
}
