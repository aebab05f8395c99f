package doctor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/natsdial"
	"github.com/aerie-dev/aerie/schema"
)

// recommendedMaxPayload is the max_payload aerie's embedded server and
// deploy/nats-server.conf use. NATS's own default is 1 MiB, which a long
// prompt, or a result (the prompt again plus a long reasoning answer),
// can exceed; the publish then fails when that prompt comes up.
const recommendedMaxPayload = 8 << 20

// checkNATS connects to the NATS server once, without reconnecting, and
// keeps the connection for the checks after it.
func checkNATS(ctx context.Context, s *session) Result {
	if s.cfg.NATSURL == "" {
		return skip("no NATS URL given (--nats)")
	}
	where := natsdial.Redact(s.cfg.NATSURL)
	nc, err := natsdial.Dial(ctx, s.cfg.NATSURL, s.cfg.NATSWait, s.cfg.Log, s.connectOptions(ctx)...)
	if err != nil {
		return fail("start nats-server (for development: aerie server) or check --nats, --creds, --nkey and --tls-ca",
			"cannot connect to %s: %v", where, err)
	}
	s.nc = nc
	detail := fmt.Sprintf("connected to %s: nats-server %s", nc.ConnectedUrlRedacted(), nc.ConnectedServerVersion())
	if cluster := nc.ConnectedClusterName(); cluster != "" {
		detail += ", cluster " + cluster
	}
	detail += ", max_payload " + formatBytes(nc.MaxPayload())
	if nc.MaxPayload() < recommendedMaxPayload {
		return warn("set max_payload: 8MB in the server configuration (see deploy/nats-server.conf)",
			"%s: under 8 MiB, a long prompt, or a result (the prompt again plus its answer), may not fit", detail)
	}
	return pass("%s", detail)
}

// connectOptions are the options of the doctor's connections: no
// reconnecting, connecting within ctx's deadline, with the configured
// credentials and options.
func (s *session) connectOptions(ctx context.Context) []nats.Option {
	// Refused permissions are reported by the checks, not printed.
	opts := []nats.Option{nats.Name("aerie-doctor"), nats.NoReconnect(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
	if deadline, ok := ctx.Deadline(); ok {
		// One attempt at most CheckTimeout: the nats check's deadline
		// also covers its wait for a server (Config.NATSWait).
		opts = append(opts, nats.Timeout(min(time.Until(deadline), s.cfg.CheckTimeout)))
	}
	if s.cfg.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(s.cfg.NATSCreds))
	}
	return append(opts, s.cfg.NATSOptions...)
}

// checkJetStream asks for the account's JetStream usage, which fails when
// JetStream is off.
func checkJetStream(ctx context.Context, s *session) Result {
	if s.nc == nil {
		return skip("no NATS connection (see nats)")
	}
	if s.inboxDenied {
		return skip("no reply can arrive: the credentials may not subscribe to the role's inbox (see permissions)")
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fail("check the NATS client options", "JetStream client: %v", err)
	}
	info, err := js.AccountInfo(ctx)
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fail("enable JetStream: a jetstream { store_dir: ... } block in the server configuration (deploy/nats-server.conf), nats-server -js, or aerie server",
			"JetStream is not enabled: %v", err)
	case err != nil:
		return fail("check that the server runs JetStream and that these credentials may use it (nats account info)",
			"JetStream account info: %v", err)
	}
	s.js = js
	detail := fmt.Sprintf("enabled: %s, %s, %s stored", plural(info.Streams, "stream"), plural(info.Consumers, "consumer"), formatBytes(info.Store))
	if info.Limits.MaxStore > 0 {
		detail += fmt.Sprintf(" of an account limit of %s", formatBytes(info.Limits.MaxStore))
	}
	if info.Domain != "" {
		detail += ", domain " + info.Domain
	}
	return pass("%s", detail)
}

// onceStreams are the streams that must keep one message per subject:
// that is what makes queuing a prompt, storing its answer and
// dead-lettering it idempotent.
var onceStreams = []struct{ name, root string }{
	{schema.PromptsStream, schema.PromptsRoot},
	{schema.ResultsStream, schema.ResultsRoot},
	{schema.DeadStream, schema.DeadRoot},
}

// checkStreams looks up aerie's streams without creating any. Missing
// streams are normal before the first produce; a stream of the wrong
// shape is not.
func checkStreams(ctx context.Context, s *session) Result {
	if s.js == nil {
		return skip("no JetStream (see jetstream)")
	}
	clustered := s.nc.ConnectedClusterName() != ""
	var present, missing, wrong, fixes, notes, hidden []string
	lookup := func(name string) (*jetstream.StreamInfo, error) {
		if !s.mayPublish("$JS.API.STREAM.INFO." + name) {
			hidden = append(hidden, name)
			return nil, nil
		}
		st, err := s.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			missing = append(missing, name)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("look up stream %s: %w", name, err)
		}
		info := st.CachedInfo()
		present = append(present, fmt.Sprintf("%s (%s, R%d)", name, lower(info.Config.Storage), info.Config.Replicas))
		if clustered && info.Config.Replicas < 3 {
			notes = append(notes, name)
		}
		return info, nil
	}
	for _, want := range onceStreams {
		info, err := lookup(want.name)
		if err != nil {
			return fail("check the NATS connection and permissions", "%v", err)
		}
		if info == nil {
			continue
		}
		if problems, fix := streamShape(info.Config, want.root); len(problems) > 0 {
			wrong = append(wrong, want.name+": "+strings.Join(problems, ", "))
			fixes = append(fixes, fix)
		}
	}
	for _, name := range []string{schema.EventsStream, schema.AdvisoriesStream} {
		if _, err := lookup(name); err != nil {
			return fail("check the NATS connection and permissions", "%v", err)
		}
	}

	found := "none present"
	if len(present) > 0 {
		found = strings.Join(present, ", ")
	}
	if len(hidden) > 0 {
		found += fmt.Sprintf("; not looked at, the %s may not read them: %s", s.cfg.Role, strings.Join(hidden, ", "))
	}
	switch {
	case len(wrong) > 0:
		return fail(strings.Join(fixes, "; "), "not aerie's once-per-subject shape: %s", strings.Join(wrong, "; "))
	case len(missing) > 0:
		return warn("aerie produce creates them (on a cluster give the first produce --replicas 3)",
			"not created yet: %s; %s", strings.Join(missing, ", "), found)
	case len(notes) > 0:
		return warn("nats stream edit NAME --replicas 3 --force, for each (see deploy/README.md, step 4)",
			"%s; on a cluster, %s keep one copy only: losing that node's disk loses the run", found, strings.Join(notes, ", "))
	}
	return pass("once per subject, file storage: %s", found)
}

// streamShape lists what differs from the shape aerie creates a
// once-per-subject stream with, and the fix.
func streamShape(c jetstream.StreamConfig, root string) (problems []string, fix string) {
	var editable []string
	recreate := false
	if c.Retention != jetstream.LimitsPolicy {
		problems = append(problems, fmt.Sprintf("retention %s (want limits)", lower(c.Retention)))
		recreate = true
	}
	if c.Storage != jetstream.FileStorage {
		problems = append(problems, fmt.Sprintf("storage %s (want file: a restart would lose it all)", lower(c.Storage)))
		recreate = true
	}
	if !slices.Contains(c.Subjects, root+".>") {
		problems = append(problems, fmt.Sprintf("subjects %v (want %s.>)", c.Subjects, root))
		editable = append(editable, fmt.Sprintf("--subjects '%s.>'", root))
	}
	if c.MaxMsgsPerSubject != 1 {
		problems = append(problems, fmt.Sprintf("MaxMsgsPerSubject %d (want 1)", c.MaxMsgsPerSubject))
		editable = append(editable, "--max-msgs-per-subject 1")
	}
	if c.Discard != jetstream.DiscardNew {
		problems = append(problems, fmt.Sprintf("discard %s (want new)", strings.TrimPrefix(lower(c.Discard), "discard")))
		editable = append(editable, "--discard new")
	}
	if !c.DiscardNewPerSubject {
		problems = append(problems, "DiscardNewPerSubject false (want true)")
		editable = append(editable, "--discard-per-subject")
	}
	switch {
	case recreate:
		fix = fmt.Sprintf("%s cannot be edited into shape: save its data (nats stream backup %s DIR), delete it (nats stream rm %s) and let aerie produce create it", c.Name, c.Name, c.Name)
	case len(editable) > 0:
		fix = fmt.Sprintf("nats stream edit %s %s", c.Name, strings.Join(editable, " "))
	}
	return problems, fix
}

// lower renders a JetStream enum the way the nats CLI spells it: "file",
// "limits", "workqueue".
func lower(v fmt.Stringer) string { return strings.ToLower(v.String()) }
