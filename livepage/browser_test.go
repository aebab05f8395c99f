package livepage_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/aerie-dev/aerie/livepage"
	"github.com/aerie-dev/aerie/pipeline"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/simulator"
	"github.com/aerie-dev/aerie/worker"
)

// browserNames are the names a Chromium-based browser goes by.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// browser starts a headless Chromium of its own (a fresh profile under
// t.TempDir(), nothing fetched from the internet) and returns a context
// for its first tab. Without a browser the test is skipped: `make test`
// installs one where it can.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range browserNames {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Skipf("no browser to test the live page in: none of %s is on PATH (as root, `make test` installs Debian's chromium; or apt-get install chromium)", strings.Join(browserNames, ", "))
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first call starts the browser, which lives as long as ctx.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// serve serves p's page until the test ends; its event streams end
// first, so the server can close while the browser is still open.
func serve(t *testing.T, p *livepage.Page) *httptest.Server {
	srv := httptest.NewUnstartedServer(livepage.Handler(p))
	base, stop := context.WithCancel(context.Background())
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(func() {
		stop()
		srv.Close()
	})
	return srv
}

// within runs actions on the browser's tab with a deadline.
func within[T any](t *testing.T, ctx context.Context, d time.Duration, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitFor waits in the page for a JavaScript condition to be true.
func waitFor(t *testing.T, ctx context.Context, d time.Duration, cond, what string) {
	t.Helper()
	within(t, ctx, d+5*time.Second, "waiting for "+what,
		chromedp.Poll[bool](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(d)))
}

func text(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	return within(t, ctx, 10*time.Second, "read #"+id,
		chromedp.Evaluate[string](fmt.Sprintf("document.getElementById(%q).textContent", id)))
}

func count(t *testing.T, ctx context.Context, id string) int {
	t.Helper()
	s := text(t, ctx, id)
	n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	if err != nil {
		t.Fatalf("#%s shows %q, not a number", id, s)
	}
	return n
}

// artifacts is where screenshots go: $AERIE_TEST_ARTIFACTS (make test
// sets it) or the test's temporary directory.
func artifacts(t *testing.T) string {
	if dir := os.Getenv("AERIE_TEST_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("AERIE_TEST_ARTIFACTS: %v", err)
		}
		return dir
	}
	return t.TempDir()
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := within(t, ctx, 30*time.Second, "screenshot", chromedp.FullScreenshot(100))
	path := filepath.Join(artifacts(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// A real run (embedded NATS, the simulator slowed down so the run lasts a
// while) seen in a browser: the page shows the run's name and size, its
// completed count moves without the page being loaded again, and it ends
// on the run's final numbers. It fits a phone's width, too.
func TestBrowserFollowsRun(t *testing.T) {
	ctx := browser(t)

	const run, prompts = "live-page-run", 240
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := simulator.WritePrompts(f, prompts, 7); err != nil {
		t.Fatal(err)
	}
	f.Close()

	page := livepage.New(run)
	srv := serve(t, page)

	runCtx, stopRun := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stopRun()
	type result struct {
		sum *pipeline.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := pipeline.Run(runCtx, pipeline.Config{
			Run: run, PromptsFile: path, DataDir: t.TempDir(),
			Sim:     simulator.Config{Speed: 25, OutputMedian: 200, MaxNumSeqs: 32},
			Workers: 2, Worker: worker.Config{Window: 16, Grace: 100 * time.Millisecond},
			EventInterval: 250 * time.Millisecond, Observer: page,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		})
		done <- result{sum, err}
	}()

	within(t, ctx, 30*time.Second, "open the page", chromedp.Navigate(srv.URL))
	// A mark on the window: a page loaded again would lose it.
	within(t, ctx, 10*time.Second, "mark the page", chromedp.Evaluate[bool]("window.notReloaded = true"))
	waitFor(t, ctx, time.Minute, fmt.Sprintf(
		`document.getElementById("run").textContent === %q && document.getElementById("total").textContent === %q`,
		run, strconv.Itoa(prompts)), "the run's name and total")
	first := count(t, ctx, "completed")
	if first >= prompts {
		t.Fatalf("the run finished before the page showed it going (%d of %d): slow the simulator down", first, prompts)
	}
	waitFor(t, ctx, time.Minute, fmt.Sprintf(
		`Number(document.getElementById("completed").textContent.replace(/,/g, "")) > %d`, first),
		"the completed count to move")
	screenshot(t, ctx, "livepage-running.png")

	var res result
	select {
	case res = <-done:
	case <-runCtx.Done():
		t.Fatal("the run did not finish within its deadline")
	}
	if res.err != nil {
		t.Fatalf("run: %v", res.err)
	}
	if !res.sum.Done {
		t.Fatalf("run ended undone: %+v", res.sum)
	}
	final := strconv.Itoa(res.sum.Completed)
	waitFor(t, ctx, 30*time.Second, fmt.Sprintf(
		`document.getElementById("completed").textContent.replace(/,/g, "") === %q && document.getElementById("phase").textContent === "done"`,
		final), "the final count, "+final+", and phase done")
	if got := count(t, ctx, "failed"); got != res.sum.Failed {
		t.Errorf("page shows %d failed, the run %d", got, res.sum.Failed)
	}
	if !within(t, ctx, 10*time.Second, "check the mark", chromedp.Evaluate[bool]("window.notReloaded === true")) {
		t.Error("the page was loaded again: it should update in place")
	}
	if conn := text(t, ctx, "conn"); conn != "live" {
		t.Errorf("connection shows %q; want live (the event stream)", conn)
	}
	if bars := within(t, ctx, 10*time.Second, "count bars",
		chromedp.Evaluate[int](`document.querySelectorAll("#chart-len rect").length`)); bars == 0 {
		t.Error("no bars in the answer-length histogram")
	}
	screenshot(t, ctx, "livepage-done.png")

	// A phone: no card wider than the screen.
	within(t, ctx, 10*time.Second, "phone viewport",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch))
	waitFor(t, ctx, 10*time.Second, `window.innerWidth === 390`, "the phone's width")
	fits := `(() => { const w = document.documentElement.clientWidth;
		return document.documentElement.scrollWidth <= w &&
			[...document.querySelectorAll(".card, header")].every((e) => e.getBoundingClientRect().right <= w + 0.5); })()`
	if !within(t, ctx, 10*time.Second, "measure the layout", chromedp.Evaluate[bool](fits)) {
		t.Error("the page is wider than a 390 px phone")
	}
	screenshot(t, ctx, "livepage-phone.png")
}

// Names and reasons are shown as text: markup in them stays inert.
func TestBrowserEscapes(t *testing.T) {
	ctx := browser(t)
	const evil = `<img src=x onerror="window.pwned=1">`
	page := livepage.New("escapes")
	t0 := time.Now().Add(-time.Minute)
	for i := range 4 { // with the ETA's band
		page.Event(schema.Throughput{Run: "escapes", Time: t0.Add(time.Duration(i) * 10 * time.Second), Phase: schema.PhaseSteady,
			Total: 10, Completed: 1 + i, ETASec: float64(300 - 10*i), ETALowSec: float64(250 - 10*i), ETAHighSec: float64(400 - 10*i)})
	}
	page.Event(schema.Throughput{Run: "escapes", Time: time.Now(), Phase: schema.PhaseSteady, Total: 10, Completed: 1,
		Failed: 1, FailedByReason: map[string]int{evil: 1}, ETASec: 200, ETALowSec: 150, ETAHighSec: 300, WriteError: evil})
	page.Heartbeat(schema.Heartbeat{Run: "escapes", Worker: evil, Host: evil, Time: time.Now(), Window: 4,
		Paused: true, PausedReason: evil})
	srv := serve(t, page)

	within(t, ctx, 30*time.Second, "open the page", chromedp.Navigate(srv.URL))
	waitFor(t, ctx, 30*time.Second, `document.querySelectorAll("#chart-eta polygon").length > 0`, "the ETA's band")
	if os.Getenv("AERIE_TEST_ARTIFACTS") != "" {
		screenshot(t, ctx, "livepage-escapes.png")
	}
	waitFor(t, ctx, 30*time.Second, `document.getElementById("reasons").textContent.includes("<img")`, "the reason as text")
	if n := within(t, ctx, 10*time.Second, "count images",
		chromedp.Evaluate[int](`document.querySelectorAll("img").length + (window.pwned ? 100 : 0)`)); n != 0 {
		t.Errorf("markup from a reason or a worker's name became %d elements or ran", n)
	}
	if !strings.Contains(text(t, ctx, "workers"), evil) || !strings.Contains(text(t, ctx, "write-error"), evil) {
		t.Error("the worker's name or the write error is not shown as text")
	}
}

// Where the event stream is refused (a proxy that buffers, say), the page
// polls /api/state and still follows the run.
func TestBrowserPollsWithoutStream(t *testing.T) {
	ctx := browser(t)
	page := livepage.New("polled")
	page.Event(schema.Throughput{Run: "polled", Time: time.Now(), Phase: schema.PhaseSteady, Total: 50, Completed: 3,
		ETASec: -1, ETALowSec: -1, ETAHighSec: -1})
	h := livepage.Handler(page)
	noStream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/events" {
			http.Error(w, "no streams here", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(noStream)
	defer srv.Close()

	within(t, ctx, 30*time.Second, "open the page", chromedp.Navigate(srv.URL))
	within(t, ctx, 10*time.Second, "mark the page", chromedp.Evaluate[bool]("window.notReloaded = true"))
	waitFor(t, ctx, 30*time.Second, `document.getElementById("completed").textContent === "3"`, "the first count")
	page.Event(schema.Throughput{Run: "polled", Time: time.Now(), Phase: schema.PhaseSteady, Total: 50, Completed: 9,
		ETASec: -1, ETALowSec: -1, ETAHighSec: -1})
	waitFor(t, ctx, 30*time.Second, `document.getElementById("completed").textContent === "9"`, "the count to move by polling")
	if conn := text(t, ctx, "conn"); conn != "polling" {
		t.Errorf("connection shows %q; want polling", conn)
	}
	if !within(t, ctx, 10*time.Second, "check the mark", chromedp.Evaluate[bool]("window.notReloaded === true")) {
		t.Error("the page was loaded again: it should update in place")
	}
}

// A run that waits for slots (its workers serve other runs) says so,
// with its priority; the banner goes once it has slots again.
func TestBrowserWaitingForSlots(t *testing.T) {
	ctx := browser(t)
	page := livepage.New("low-priority")
	page.Event(schema.Throughput{Run: "low-priority", Time: time.Now(), Phase: schema.PhaseWaiting, Total: 500,
		Workers: 2, WaitingForSlots: true, Priority: -1, ETASec: -1, ETALowSec: -1, ETAHighSec: -1})
	for _, w := range []string{"gpu-a", "gpu-b"} {
		page.Heartbeat(schema.Heartbeat{Run: "low-priority", Worker: w, Host: w, Time: time.Now(), Window: 256})
	}
	srv := serve(t, page)
	within(t, ctx, 30*time.Second, "open the page", chromedp.Navigate(srv.URL))
	waitFor(t, ctx, 30*time.Second, `!document.getElementById("slots").hidden &&
		document.getElementById("slots").textContent.includes("its priority -1")`, "the waiting-for-slots banner")
	screenshot(t, ctx, "livepage-waiting-for-slots.png")
	page.Event(schema.Throughput{Run: "low-priority", Time: time.Now(), Phase: schema.PhaseRampUp, Total: 500, InFlight: 40,
		Workers: 2, Priority: -1, ETASec: -1, ETALowSec: -1, ETAHighSec: -1})
	waitFor(t, ctx, 30*time.Second, `document.getElementById("slots").hidden`, "the banner gone once the run has slots")
}

// A run whose ETA waits on one long answer says which, under the ETA;
// the note goes once the run is done.
func TestBrowserStraggler(t *testing.T) {
	ctx := browser(t)
	page := livepage.New("long-tail")
	page.Event(schema.Throughput{Run: "long-tail", Time: time.Now(), Phase: schema.PhaseDraining, Total: 6000, Completed: 5999,
		InFlight: 1, Workers: 1, TokensPerSec: 95, ETASec: 65, ETALowSec: 20, ETAHighSec: 190, ElapsedSec: 200,
		Stragglers: &schema.Stragglers{InFlight: 1, LongestTokens: 11900, LongestSec: 120}})
	srv := serve(t, page)
	within(t, ctx, 30*time.Second, "open the page", chromedp.Navigate(srv.URL))
	waitFor(t, ctx, 30*time.Second, `!document.getElementById("eta-note").hidden &&
		document.getElementById("eta-note").textContent === "Waiting on 1 answer at 11,900 tokens, running 2m 00s."`, "the straggler under the ETA")
	screenshot(t, ctx, "livepage-straggler.png")
	page.Event(schema.Throughput{Run: "long-tail", Time: time.Now(), Phase: schema.PhaseDone, Total: 6000, Completed: 6000,
		Workers: 1, ElapsedSec: 260})
	waitFor(t, ctx, 30*time.Second, `document.getElementById("eta-note").hidden`, "the note gone once the run is done")
}

// A run short of lines that nothing will bring says so in a banner,
// which goes once lines come again.
func TestBrowserUnwritten(t *testing.T) {
	ctx := browser(t)
	page := livepage.New("moved")
	page.Event(schema.Throughput{Run: "moved", Time: time.Now(), Phase: schema.PhaseWaiting, Total: 500,
		Workers: 1, Unwritten: 500, ETASec: -1, ETALowSec: -1, ETAHighSec: -1})
	srv := serve(t, page)
	within(t, ctx, 30*time.Second, "open the page", chromedp.Navigate(srv.URL))
	waitFor(t, ctx, 30*time.Second, `!document.getElementById("unwritten").hidden &&
		document.getElementById("unwritten").textContent.includes("500 lines will never come")`, "the unwritten banner")
	screenshot(t, ctx, "livepage-unwritten.png")
	page.Event(schema.Throughput{Run: "moved", Time: time.Now(), Phase: schema.PhaseSteady, Total: 500, Completed: 20,
		Workers: 1, ETASec: -1, ETALowSec: -1, ETAHighSec: -1})
	waitFor(t, ctx, 30*time.Second, `document.getElementById("unwritten").hidden`, "the banner gone once lines come")
}

// A hidden-states run shows its rates as input tokens, the hidden
// states written of the run's, and no answer lengths.
func TestBrowserHiddenStates(t *testing.T) {
	ctx := browser(t)
	page := livepage.New("kimi-hs")
	t0 := time.Now().Add(-2 * time.Minute)
	for i := range 12 {
		page.Event(schema.Throughput{Run: "kimi-hs", Time: t0.Add(time.Duration(i) * 10 * time.Second), Phase: schema.PhaseSteady,
			Total: 25000, Completed: 900 * (i + 1), Workers: 4, InFlight: 800, RequestsPerSec: 90, TokensPerSec: 180000 + 5000*float64(i%3),
			MeanCompletionTokens: 2000, ETASec: 240 - 10*float64(i), ETALowSec: 200 - 10*float64(i), ETAHighSec: 290 - 10*float64(i),
			Task: schema.TaskHiddenStates, HiddenStatesBytes: int64(900*(i+1)) * 2000 * 57352, HiddenStatesBytesTotal: 25000 * 2000 * 57352,
			HiddenStatesBytesPerSec: 180000 * 57352})
	}
	srv := serve(t, page)
	within(t, ctx, 30*time.Second, "open the page", chromedp.Navigate(srv.URL))
	waitFor(t, ctx, 30*time.Second, `!document.getElementById("hs-stat").hidden &&
		document.getElementById("hs-bytes").textContent === "1.1 TiB / 2.6 TiB" &&
		document.getElementById("tps-label").textContent === "input tokens/s" &&
		document.getElementById("len-card").hidden`, "the hidden-states figures")
	screenshot(t, ctx, "livepage-hidden-states.png")
}
