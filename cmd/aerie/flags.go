package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/doctor"
	"github.com/aerie-dev/aerie/fsmode"
	"github.com/aerie-dev/aerie/natsdial"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
	"github.com/aerie-dev/aerie/worker"
)

// newFlags returns a flag set for a command with the logging flags every
// command has.
func newFlags(name, synopsis string) (*flag.FlagSet, *logFlags) {
	fs := flag.NewFlagSet("aerie "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: aerie %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	lf := &logFlags{}
	fs.StringVar(&lf.level, "log-level", envOr("AERIE_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env AERIE_LOG_LEVEL)")
	fs.StringVar(&lf.format, "log-format", envOr("AERIE_LOG_FORMAT", "text"), "log format: text or json (env AERIE_LOG_FORMAT)")
	if writesFiles[name] {
		fs.Var(newUmaskFlag(), "umask", "octal `mask` of the permission bits taken away from every file and directory this command creates: the default keeps outputs, logs, locks and stores to their owner (files 0600, directories 0700); 0022 makes them readable by all (0644, 0755). Files that exist keep their mode, also when rewritten (env AERIE_UMASK)")
	}
	return fs, lf
}

// writesFiles names the commands that create files or directories, which
// take --umask.
var writesFiles = map[string]bool{
	"run": true, "aggregate": true, "export": true, "gen-prompts": true,
	"server": true, "auth init": true, "doctor": true, "report": true,
}

// umaskFlag is --umask: the process umask, set once when the flags are
// parsed (see parseFlags), before the command creates anything. Its
// default is AERIE_UMASK, or fsmode.DefaultUmask when that is unset; a
// bad AERIE_UMASK is reported when the flag is not given.
type umaskFlag struct {
	mask   int
	envErr error
}

func newUmaskFlag() *umaskFlag {
	u := &umaskFlag{mask: fsmode.DefaultUmask}
	if v := os.Getenv("AERIE_UMASK"); v != "" {
		if err := u.Set(v); err != nil {
			u.envErr = fmt.Errorf("AERIE_UMASK: %w", err)
		}
	}
	return u
}

func (u *umaskFlag) String() string {
	if u == nil {
		return fsmode.FormatUmask(fsmode.DefaultUmask)
	}
	return fsmode.FormatUmask(u.mask)
}

func (u *umaskFlag) Set(s string) error {
	m, err := fsmode.ParseUmask(s)
	if err != nil {
		return err
	}
	u.mask, u.envErr = m, nil
	return nil
}

type logFlags struct{ level, format string }

// logger builds the process logger, writing to w.
func (lf *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(lf.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", lf.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch lf.format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", lf.format)
	}
	l := slog.New(h)
	slog.SetDefault(l)
	return l, nil
}

// natsFlags are the connection flags of every command that talks to NATS.
// role is the aerie role the command plays: its replies arrive below
// that role's inbox prefix, the only one a server enforcing the roles lets
// it subscribe to.
type natsFlags struct {
	url, creds, nkey string
	tlsCA, tlsCert   string
	tlsKey           string
	role             auth.Role
	// connectWait is how long the command waits at start-up for a
	// server that does not answer (0: it fails at once).
	connectWait *waitFlag
}

func addNATSFlags(fs *flag.FlagSet, role auth.Role) *natsFlags {
	nf := &natsFlags{role: role}
	fs.StringVar(&nf.url, "nats", envOr("AERIE_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma separated (env AERIE_NATS_URL)")
	fs.StringVar(&nf.creds, "creds", os.Getenv("AERIE_NATS_CREDS"), "NATS credentials file (env AERIE_NATS_CREDS)")
	fs.StringVar(&nf.nkey, "nkey", os.Getenv("AERIE_NATS_NKEY"), "NATS user nkey seed file of this command's role, "+string(role)+" (env AERIE_NATS_NKEY; aerie server --auth-dir and aerie auth init write them)")
	fs.StringVar(&nf.tlsCA, "tls-ca", os.Getenv("AERIE_NATS_TLS_CA"), "PEM CA bundle that signed the NATS server's certificate (env AERIE_NATS_TLS_CA)")
	fs.StringVar(&nf.tlsCert, "tls-cert", os.Getenv("AERIE_NATS_TLS_CERT"), "PEM client certificate, for a server that requires mutual TLS (env AERIE_NATS_TLS_CERT)")
	fs.StringVar(&nf.tlsKey, "tls-key", os.Getenv("AERIE_NATS_TLS_KEY"), "PEM private key of --tls-cert (env AERIE_NATS_TLS_KEY)")
	nf.connectWait = addWaitFlag(fs, "connect-wait", "AERIE_CONNECT_WAIT", natsdial.DefaultWait,
		"how long to wait at start-up for a NATS server that does not answer yet, trying again with a back-off and saying so every 10 s; 0 fails at once")
	return nf
}

// waitFlag is a duration flag of how long to wait for something, whose
// default an environment variable may set.
type waitFlag struct {
	name string
	d    time.Duration
	// envErr is why the environment variable could not be read:
	// reported by get, when the command starts.
	envErr error
}

// addWaitFlag declares --name, defaulting to the duration in the
// environment variable env, then def.
func addWaitFlag(fs *flag.FlagSet, name, env string, def time.Duration, help string) *waitFlag {
	w := &waitFlag{name: name}
	if v := os.Getenv(env); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			def = d
		} else {
			w.envErr = fmt.Errorf("%s=%q is not a duration such as %s or 0", env, v, def)
		}
	}
	fs.DurationVar(&w.d, name, def, help+" (env "+env+")")
	return w
}

// get returns the wait, or what is wrong with it.
func (w *waitFlag) get() (time.Duration, error) {
	if w.envErr != nil {
		return 0, w.envErr
	}
	if w.d < 0 {
		return 0, fmt.Errorf("--%s %s: want 0 or more (0: do not wait)", w.name, w.d)
	}
	return w.d, nil
}

// addBackendWaitFlag declares --backend-wait.
func addBackendWaitFlag(fs *flag.FlagSet) *waitFlag {
	return addWaitFlag(fs, "backend-wait", "AERIE_BACKEND_WAIT", doctor.DefaultBackendWait,
		"how long to wait at start-up for a backend that is starting (/health answers 503, or nothing listens yet) or sheds load (429, 5xx), trying again with a back-off and saying so every 30 s; a refused key, an unknown model or a 404 fail at once; 0 does not wait")
}

// The flags below are shared by several commands: each is declared here
// once, with one help text, and reads the same environment variable in
// every command. A command's own default, and what an empty value does
// there, is the only part that differs.

// backendFlags are --backend and --api-key-file.
type backendFlags struct{ url, keyFile string }

// addBackendFlags declares --backend, defaulting to AERIE_BACKEND, then
// def, and --api-key-file; note says what the command does with the
// backend, or with an empty --backend, when that is not plain.
func addBackendFlags(fs *flag.FlagSet, def, note string) *backendFlags {
	bf := &backendFlags{}
	help := "OpenAI-compatible base URL of the LLM server, e.g. http://127.0.0.1:8000 (env AERIE_BACKEND)"
	if note != "" {
		help += "; " + note
	}
	fs.StringVar(&bf.url, "backend", envOr("AERIE_BACKEND", def), help)
	fs.StringVar(&bf.keyFile, "api-key-file", "", "file holding the backend API key (default: env AERIE_API_KEY, or none); the key is never logged")
	return bf
}

// apiKey reads the backend API key from --api-key-file, or AERIE_API_KEY
// when no file is given.
func (bf *backendFlags) apiKey() (string, error) {
	if bf.keyFile == "" {
		return os.Getenv("AERIE_API_KEY"), nil
	}
	b, err := os.ReadFile(bf.keyFile)
	if err != nil {
		return "", fmt.Errorf("--api-key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("--api-key-file %s is empty", bf.keyFile)
	}
	return key, nil
}

// clientConfig is the backend client's configuration: with
// --api-key-file the client reads the key from the file, and reads it
// again when the backend refuses it (a worker paused on 401 resumes once
// the file holds the new key); otherwise AERIE_API_KEY.
func (bf *backendFlags) clientConfig() openai.Config {
	if bf.keyFile != "" {
		return openai.Config{BaseURL: bf.url, APIKeyFile: bf.keyFile}
	}
	return openai.Config{BaseURL: bf.url, APIKey: os.Getenv("AERIE_API_KEY")}
}

// addDataDirFlag declares --data-dir, defaulting to AERIE_DATA_DIR, then
// def; note says what else the command keeps there, or what an empty
// value does.
func addDataDirFlag(fs *flag.FlagSet, def, note string) *string {
	help := "output root: a run's completions.jsonl, failed.jsonl and events.jsonl are in <data-dir>/<run>/ (env AERIE_DATA_DIR)"
	if note != "" {
		help += "; " + note
	}
	return fs.String("data-dir", envOr("AERIE_DATA_DIR", def), help)
}

// defaultStore is aerie server's --store: the nats directory of
// AERIE_DATA_DIR when that is set, as aerie run keeps its store.
func defaultStore() string {
	if dir := os.Getenv("AERIE_DATA_DIR"); dir != "" {
		return filepath.Join(dir, "nats")
	}
	return "./data/nats"
}

// windowFlags are --window (a number of requests, or auto) and, for the
// commands that run workers, --max-window, --window-poll and
// --hand-back-after.
type windowFlags struct {
	size          int
	auto          bool
	max           int
	poll          time.Duration
	handBackAfter time.Duration
	// hedge is --hedge (auto or off) and hedgeMax --hedge-max.
	hedge    string
	hedgeMax int
}

func (f *windowFlags) String() string {
	if f == nil {
		return ""
	}
	if f.auto {
		return "auto"
	}
	return strconv.Itoa(f.size)
}

func (f *windowFlags) Set(v string) error {
	if v == "auto" {
		f.auto, f.size = true, worker.DefaultWindow
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("want a number of requests (at least 1) or auto, got %q", v)
	}
	f.auto, f.size = false, n
	return nil
}

// addWindowFlag declares --window.
func addWindowFlag(fs *flag.FlagSet) *windowFlags {
	f := &windowFlags{size: worker.DefaultWindow, hedge: "auto"}
	fs.Var(f, "window", "requests in flight per worker, exactly (default 200, which suits vLLM's default of 256 running sequences), or auto: sized from the backend's own /metrics to keep its running slots busy with a small queue, starting at 200 and kept there if the backend serves no vLLM metrics; a worker holds up to twice this in prompts: the next generates while one is stored, and with --turns all conversations wait between two turns")
	return f
}

// addWorkerWindowFlags declares --window and what shapes a worker's
// window: --max-window, --window-poll and --hand-back-after.
func addWorkerWindowFlags(fs *flag.FlagSet) *windowFlags {
	f := addWindowFlag(fs)
	fs.IntVar(&f.max, "max-window", worker.DefaultMaxWindow, "with --window auto, the most requests a worker may have in flight")
	fs.DurationVar(&f.poll, "window-poll", worker.DefaultWindowPoll, "with --window auto, how often the backend's /metrics are read")
	fs.DurationVar(&f.handBackAfter, "hand-back-after", worker.DefaultHandBackAfter, "at the end of a run, a request that has waited this long (and at least 3 times the backend's shortest time to first token) without a first token is handed back for an idle worker of the run; 0 never hands back")
	fs.StringVar(&f.hedge, "hedge", "auto", "auto: once the run has nothing left to deliver, a worker with free slots sends a second copy of a request that a worker at least 1.5 times slower per request has run for longer than this one would take for the whole answer; the first answer stored is kept and the other copy cancelled. off: never")
	fs.IntVar(&f.hedgeMax, "hedge-max", 0, "with --hedge auto, the most hedges a worker runs at once; 0: as many as its window has free slots")
	return f
}

// check refuses window flags that would be taken for their defaults
// or make no sense: the worker's config reads a zero --max-window or
// --window-poll as "the default", which a user who typed 0 did not mean.
func (f *windowFlags) check() error {
	if f.max < 1 {
		return fmt.Errorf("--max-window %d: want the most requests a worker may have in flight with --window auto, at least 1 (default %d)", f.max, worker.DefaultMaxWindow)
	}
	if f.poll <= 0 {
		return fmt.Errorf("--window-poll %v: want how often the backend's /metrics are read, more than 0 (default %v)", f.poll, worker.DefaultWindowPoll)
	}
	if f.handBackAfter < 0 {
		return fmt.Errorf("--hand-back-after %v: want a wait of at least 0 (0 never hands back)", f.handBackAfter)
	}
	if f.hedge != "auto" && f.hedge != "off" {
		return fmt.Errorf("--hedge %q: want auto (hedge slower workers' requests at the end of a run) or off", f.hedge)
	}
	if f.hedgeMax < 0 {
		return fmt.Errorf("--hedge-max %d: want the most hedges a worker runs at once, at least 0 (0: as many as slots are free)", f.hedgeMax)
	}
	return nil
}

// apply sets cfg's window fields from the flags.
func (f *windowFlags) apply(cfg *worker.Config) {
	cfg.Window, cfg.AutoWindow, cfg.MaxWindow, cfg.WindowPoll = f.size, f.auto, f.max, f.poll
	cfg.HandBackAfter = f.handBack()
	cfg.HedgeOff, cfg.HedgeMax = f.hedge == "off", f.hedgeMax
}

// handBack is --hand-back-after as worker.Config has it: negative for
// never (the flag's 0).
func (f *windowFlags) handBack() time.Duration {
	if f.handBackAfter == 0 {
		return -1
	}
	return f.handBackAfter
}

// yieldFlags are a worker's flags for sharing its server with
// interactive requests.
type yieldFlags struct {
	on       bool
	slo      time.Duration
	priority int
}

// addYieldFlags declares --yield-to-serving and what tunes it.
func addYieldFlags(fs *flag.FlagSet) *yieldFlags {
	f := &yieldFlags{}
	fs.BoolVar(&f.on, "yield-to-serving", false, "the backend also takes interactive requests: send every request with vLLM's priority --batch-priority, and cap the window while requests that are not this worker's wait in the server or its time-to-first-token p95 is above --serving-ttft-slo; the server must run vLLM with --scheduling-policy priority")
	fs.DurationVar(&f.slo, "serving-ttft-slo", worker.DefaultServingTTFTSLO, "with --yield-to-serving, the time to first token (p95 over the last minute, from the server's own histogram) the window is held to")
	fs.IntVar(&f.priority, "batch-priority", worker.DefaultBatchPriority, "with --yield-to-serving, the vLLM priority of this worker's requests: interactive ones have 0, and lower goes first")
	return f
}

// check refuses yield flags that make no sense.
func (f *yieldFlags) check() error {
	if f.slo <= 0 {
		return fmt.Errorf("--serving-ttft-slo %v: want a time to first token above 0 (default %v)", f.slo, worker.DefaultServingTTFTSLO)
	}
	if f.on && f.priority <= 0 {
		return fmt.Errorf("--batch-priority %d: want a priority above 0, the interactive requests' (vLLM serves lower values first)", f.priority)
	}
	return nil
}

// apply sets cfg's yield fields from the flags.
func (f *yieldFlags) apply(cfg *worker.Config) {
	cfg.YieldToServing, cfg.ServingTTFTSLO, cfg.BatchPriority = f.on, f.slo, f.priority
}

// addGraceFlag declares --grace.
func addGraceFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("grace", worker.DefaultGrace, "on the first SIGINT/SIGTERM, time in-flight prompts get to finish before they are handed back to the queue")
}

// parseFlags parses args into fs. Every input of a command is a flag, so
// an argument left over is a mistake (a flag without its dashes, or a
// value with a space in it), reported rather than ignored.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: every input is a flag (see %s -h)", fs.Arg(0), fs.Name())
	}
	if f := fs.Lookup("umask"); f != nil {
		u := f.Value.(*umaskFlag)
		if u.envErr != nil {
			return u.envErr
		}
		fsmode.SetUmask(u.mask)
	}
	return nil
}

// parseRunFlags parses the flags of a command that works on one run, sets
// up the logger and checks --run.
func parseRunFlags(fs *flag.FlagSet, lf *logFlags, args []string, run *string) (*slog.Logger, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	log, err := lf.logger(os.Stderr)
	if err != nil {
		return nil, err
	}
	if err := requireRun(*run); err != nil {
		return nil, err
	}
	return log, nil
}

// requireRun checks the --run flag.
func requireRun(run string) error {
	if run == "" {
		return errors.New("--run is required: name the run (e.g. --run kimi-k25-25k)")
	}
	return schema.ValidateRun(run)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// optionalFloat is a float flag that remembers whether it was set, so an
// unset sampling parameter is left to the backend's default.
type optionalFloat struct{ v *float64 }

func (o *optionalFloat) String() string {
	if o.v == nil {
		return ""
	}
	return fmt.Sprint(*o.v)
}

func (o *optionalFloat) Set(s string) error {
	var f float64
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%g", &f); err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	o.v = &f
	return nil
}

// optionalInt is an int flag that remembers whether it was set.
type optionalInt struct{ v *int }

func (o *optionalInt) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.Itoa(*o.v)
}

func (o *optionalInt) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not an integer", s)
	}
	o.v = &n
	return nil
}

// optionalInt64 is an int64 flag that remembers whether it was set.
type optionalInt64 struct{ v *int64 }

func (o *optionalInt64) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.FormatInt(*o.v, 10)
}

func (o *optionalInt64) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a 64-bit integer", s)
	}
	o.v = &n
	return nil
}

// stringList is a flag given once per value; unset, it is nil.
type stringList struct{ v []string }

func (l *stringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.v, ",")
}

func (l *stringList) Set(s string) error {
	if s == "" {
		return errors.New("empty: give a non-empty string")
	}
	l.v = append(l.v, s)
	return nil
}

// jsonObject is a flag holding one JSON object, kept canonical (see
// schema.CanonicalObject); unset, it is nil. check, when set, refuses
// objects the flag cannot take.
type jsonObject struct {
	v     json.RawMessage
	check func(json.RawMessage) error
}

func (o *jsonObject) String() string {
	if o == nil {
		return ""
	}
	return string(o.v)
}

func (o *jsonObject) Set(s string) error {
	obj, err := schema.CanonicalObject([]byte(s))
	if err != nil {
		return fmt.Errorf("%w (give one JSON object, quoted for the shell, e.g. '{\"key\": true}')", err)
	}
	if o.check != nil {
		if err := o.check(obj); err != nil {
			return err
		}
	}
	o.v = obj
	return nil
}
