package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/engine"
	"github.com/aerie-dev/aerie/openai"
	"github.com/aerie-dev/aerie/schema"
)

// session carries what the checks found to the checks after them.
type session struct {
	cfg  Config
	done map[string]Status // status of each check run so far

	nc *nats.Conn // nil unless the nats check connected
	// granted is what the server says the credentials may do, once
	// grantedKnown (nil then: everything).
	granted      *server.Permissions
	grantedKnown bool
	// inboxDenied: the credentials may not subscribe to the inbox the
	// connection's replies go to.
	inboxDenied bool
	js          jetstream.JetStream // nil unless JetStream answered

	consumer *jetstream.ConsumerInfo // the run's workers consumer, if it exists
	manifest *schema.Manifest        // the run's manifest, if present and readable

	client    *openai.Client // nil when Backend is empty or invalid
	clientErr error          // why client is nil although Backend is set
	models    []openai.Model // what the backend serves, once listed
	listed    bool           // models holds the backend's answer
	// engine is the backend's engine once the engine check found it;
	// client then speaks its dialect.
	engine *engine.Found

	// prompts is the valid prompts in PromptsFile once scanned, and
	// turns their turns to generate with --turns all (prompts without).
	prompts, turns int
}

func newSession(cfg Config) *session {
	s := &session{cfg: cfg, done: make(map[string]Status)}
	if cfg.Backend != "" {
		// The client's own time limits are never reached: every call
		// runs under the check's shorter deadline.
		s.client, s.clientErr = openai.New(openai.Config{BaseURL: cfg.Backend, APIKey: cfg.APIKey})
	}
	return s
}

func (s *session) close() {
	if s.nc != nil {
		s.nc.Close()
	}
}

// passed reports whether the check named name ran and passed or warned.
func (s *session) passed(name string) bool {
	st := s.done[name]
	return st == Pass || st == Warn
}

// scrub removes the API key from text that is about to be reported, in
// case something echoed it.
func (s *session) scrub(text string) string {
	if s.cfg.APIKey == "" || !strings.Contains(text, s.cfg.APIKey) {
		return text
	}
	return strings.ReplaceAll(text, s.cfg.APIKey, "[redacted]")
}

// runModel is the model the run generates with: the manifest's, or, when
// there is no manifest yet, the one given in Config.Model, or else the
// backend's only model. from says which.
func (s *session) runModel() (model, from string, ok bool) {
	if s.manifest != nil {
		return s.manifest.Model, "the run's model", true
	}
	if s.cfg.Model != "" {
		return s.cfg.Model, "the model given; no manifest yet", true
	}
	if s.listed && len(s.models) == 1 {
		return s.models[0].ID, "the backend's only model; no manifest yet", true
	}
	return "", "", false
}

// servedModel returns the backend's entry for model, if it serves it.
func (s *session) servedModel(model string) (openai.Model, bool) {
	for _, m := range s.models {
		if m.ID == model {
			return m, true
		}
	}
	return openai.Model{}, false
}

// maxTokens is the run's max_tokens; 0 when unset or unknown.
func (s *session) maxTokens() int {
	if s.manifest == nil {
		return s.cfg.MaxTokens
	}
	return s.manifest.Params.MaxTokens
}

// samples is how many samples the run takes of each prompt: the
// manifest's, or before produce Config.Samples; at least one.
func (s *session) samples() int {
	if s.manifest != nil {
		return max(s.manifest.Samples, 1)
	}
	return max(s.cfg.Samples, 1)
}

// tokenIDs reports whether the run stores token ids.
func (s *session) tokenIDs() bool {
	if s.manifest != nil {
		return s.manifest.ReturnTokenIDs
	}
	return s.cfg.ReturnTokenIDs
}

// turnsAll reports whether the run generates every turn.
func (s *session) turnsAll() bool {
	if s.manifest != nil {
		return s.manifest.TurnsMode() == schema.TurnsAll
	}
	return s.cfg.TurnsAll
}

func result(st Status, format string, args ...any) Result {
	return Result{Status: st, Detail: fmt.Sprintf(format, args...)}
}

func pass(format string, args ...any) Result { return result(Pass, format, args...) }
func skip(format string, args ...any) Result { return result(Skip, format, args...) }

// fail returns a failure with its fix.
func fail(fix, format string, args ...any) Result {
	r := result(Fail, format, args...)
	r.Fix = fix
	return r
}

// warn returns a warning with its fix (may be empty).
func warn(fix, format string, args ...any) Result {
	r := result(Warn, format, args...)
	r.Fix = fix
	return r
}

// await runs f, which may block in a system call that ignores ctx (a
// hung network file system), and returns its value, or ctx's error if ctx
// ends first. f must not touch shared state: it may still be running
// after await returns.
func await[T any](ctx context.Context, f func() T) (T, error) {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
