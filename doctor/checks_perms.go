package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/auth"
	"github.com/aerie-dev/aerie/schema"
)

// userInfoWait bounds the wait for the server's answer to a user info
// request. The server answers at once when it answers at all; a server
// without a system account never does.
const userInfoWait = 2 * time.Second

// Why a user info request got no answer.
var (
	errInboxDenied = errors.New("may not subscribe to its inbox")
	errInfoDenied  = errors.New("may not publish " + auth.UserInfoSubject)
	errNoAnswer    = errors.New("no answer")
)

// userInfo asks the server which user nc is and what it may do. The
// server answers the request itself; nothing is created or changed.
// errInboxDenied and errInfoDenied say which permission stopped it.
func userInfo(ctx context.Context, nc *nats.Conn) (*server.UserInfo, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The server refuses a subscription or a publish with an error it
	// sends before the answer to the flush's ping, so once the flush
	// returns, a refusal is known.
	if denied, err := refused(ctx, nc, "Subscription to"); err != nil {
		return nil, err
	} else if denied {
		return nil, errInboxDenied
	}
	if err := nc.PublishRequest(auth.UserInfoSubject, inbox, nil); err != nil {
		return nil, err
	}
	if denied, err := refused(ctx, nc, "Publish to"); err != nil {
		return nil, err
	} else if denied {
		return nil, errInfoDenied
	}
	wctx, cancel := context.WithTimeout(ctx, userInfoWait)
	defer cancel()
	msg, err := sub.NextMsgWithContext(wctx)
	if err != nil {
		return nil, fmt.Errorf("%w within %v", errNoAnswer, userInfoWait)
	}
	if msg.Header.Get("Status") == "503" {
		return nil, fmt.Errorf("%w: nothing answers %s", errNoAnswer, auth.UserInfoSubject)
	}
	var resp struct {
		Data  *server.UserInfo `json:"data"`
		Error *server.ApiError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("user info: %w", err)
	}
	if resp.Error != nil || resp.Data == nil {
		return nil, fmt.Errorf("%w: the server answered %s", errNoAnswer, msg.Data)
	}
	return resp.Data, nil
}

// refused flushes nc and reports whether the server refused a
// permission since, as an error whose text holds what ("Publish to").
func refused(ctx context.Context, nc *nats.Conn, what string) (bool, error) {
	before := nc.LastError()
	if err := nc.FlushWithContext(ctx); err != nil {
		return false, err
	}
	after := nc.LastError()
	return after != nil && after != before && errors.Is(after, nats.ErrPermissionViolation) && strings.Contains(after.Error(), what), nil
}

// roleCommand names what each role's credentials are for.
func roleCommand(r auth.Role) string {
	switch r {
	case auth.Producer:
		return "aerie produce"
	case auth.Worker:
		return "aerie work"
	case auth.Aggregator:
		return "aerie aggregate"
	}
	return "aerie replay, reconcile and runs"
}

// need is one subject a role's command publishes or subscribes to.
type need struct {
	subject string
	sub     bool
}

func (n need) verb() string {
	if n.sub {
		return "subscribe to"
	}
	return "publish"
}

// needs lists what role r's command publishes and subscribes to: the
// permissions package auth grants it.
func needs(r auth.Role) ([]need, error) {
	p, err := auth.Permissions(r)
	if err != nil {
		return nil, err
	}
	var out []need
	for _, s := range p.Publish.Allow {
		out = append(out, need{subject: s})
	}
	for _, s := range p.Subscribe.Allow {
		out = append(out, need{subject: s, sub: true})
	}
	return out, nil
}

// missing lists the needs of role r that granted does not allow.
func missing(r auth.Role, granted *server.Permissions) ([]need, error) {
	ns, err := needs(r)
	if err != nil {
		return nil, err
	}
	var out []need
	for _, n := range ns {
		if !allows(granted, n) {
			out = append(out, n)
		}
	}
	// What tells most comes first: the inbox, without which nothing
	// works, then aerie's own subjects, then the JetStream API.
	rank := func(n need) int {
		switch {
		case n.sub:
			return 0
		case !strings.HasPrefix(n.subject, "$"):
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b need) int { return rank(a) - rank(b) })
	return out, nil
}

// allows reports whether p lets a client publish or subscribe to every
// subject n.subject matches. Nil permissions allow everything, as does
// an empty allow list; a deny entry that overlaps the subject takes any
// part of it away.
func allows(p *server.Permissions, n need) bool {
	if p == nil {
		return true
	}
	sp := p.Publish
	if n.sub {
		sp = p.Subscribe
	}
	if sp == nil {
		return true
	}
	ok := len(sp.Allow) == 0
	for _, a := range sp.Allow {
		if subjectWithin(n.subject, a) {
			ok = true
			break
		}
	}
	if !ok {
		return false
	}
	for _, d := range sp.Deny {
		if subjectsOverlap(n.subject, d) {
			return false
		}
	}
	return true
}

// subjectWithin reports whether every subject that subj matches, a
// subject with wildcards, is matched by pattern: nats-server's own subset
// match, the rule it applies to permissions.
func subjectWithin(subj, pattern string) bool { return server.SubjectMatchesFilter(subj, pattern) }

// subjectsOverlap reports whether some subject matches both a and b.
func subjectsOverlap(a, b string) bool { return server.SubjectsCollide(a, b) }

// purpose says what a role cannot do without a subject.
func purpose(n need) string {
	subj := n.subject
	stream := func(prefix string) (string, bool) {
		rest, ok := strings.CutPrefix(subj, prefix)
		if !ok {
			return "", false
		}
		name, _, _ := strings.Cut(rest, ".")
		return name, true
	}
	const api = "$JS.API."
	if n.sub {
		switch {
		case strings.HasPrefix(subj, "_INBOX_"):
			return "cannot receive the replies to its requests"
		case strings.HasSuffix(subj, ".heartbeat.*"):
			return "cannot see the workers' heartbeats"
		case strings.HasSuffix(subj, ".hedge.*"):
			return "cannot hear which copy of a hedged request was stored first"
		case subj == ">":
			return "cannot subscribe to everything, as the admin role does"
		}
		return "cannot receive what it subscribes to"
	}
	switch {
	case subj == ">":
		return "cannot publish everything, as the admin role does"
	case subj == api+"INFO":
		return "cannot see its JetStream account"
	case subj == auth.UserInfoSubject:
		return "cannot ask the server what it may do"
	case strings.HasPrefix(subj, schema.PromptsRoot+"."):
		return "cannot queue prompts"
	case strings.HasPrefix(subj, schema.ResultsRoot+"."):
		return "cannot store answers"
	case strings.HasPrefix(subj, schema.DeadRoot+"."):
		return "cannot dead-letter prompts"
	case strings.HasPrefix(subj, schema.TurnsRoot+"."):
		return "cannot store the turns of a conversation"
	case strings.HasPrefix(subj, schema.EventsRoot+".") && strings.HasSuffix(subj, ".heartbeat.*"):
		return "cannot send heartbeats"
	case strings.HasPrefix(subj, schema.EventsRoot+".") && strings.HasSuffix(subj, ".hedge.*"):
		return "cannot announce its hedges"
	case strings.HasPrefix(subj, schema.EventsRoot+"."):
		return "cannot publish throughput events"
	case subj == "$KV."+schema.RunsBucket+".>":
		return "cannot write run manifests"
	case subj == "$KV."+schema.AttemptsBucket+".>":
		return "cannot count the attempts of each prompt"
	case subj == "$KV."+schema.LeasesBucket+".>":
		return "cannot hold the run's lease"
	}
	for _, c := range []struct{ prefix, what string }{
		{api + "STREAM.CREATE.", "cannot create stream %s"},
		{api + "STREAM.UPDATE.", "cannot update stream %s"},
		{api + "STREAM.PURGE.", "cannot remove finished entries from stream %s"},
		{api + "STREAM.INFO.", "cannot read stream %s"},
		{api + "STREAM.MSG.GET.", "cannot read stream %s"},
		{api + "DIRECT.GET.", "cannot read stream %s"},
		{api + "CONSUMER.CREATE.", "cannot create consumers on %s"},
		{api + "CONSUMER.DURABLE.CREATE.", "cannot create consumers on %s"},
		{api + "CONSUMER.INFO.", "cannot look up consumers on %s"},
		{api + "CONSUMER.DELETE.", "cannot remove its watchers on %s"},
		{api + "CONSUMER.MSG.NEXT.", "cannot fetch messages from %s"},
		{"$JS.ACK.", "cannot acknowledge messages of %s"},
		{"$JS.FC.", "cannot keep up a watch on %s"},
	} {
		if name, ok := stream(c.prefix); ok {
			return fmt.Sprintf(c.what, name)
		}
	}
	return "lacks what it needs"
}

// checkPermissions asks the server what the credentials may do and
// compares it with what the role's command needs, naming each subject
// that is missing and what it is for, and whose credentials these are
// when they are another role's.
func checkPermissions(ctx context.Context, s *session) Result {
	role := s.cfg.Role
	if role == "" {
		return skip("no role given (--role)")
	}
	if _, err := auth.ParseRole(string(role)); err != nil {
		return fail("use --role producer, worker, aggregator or admin", "%v", err)
	}
	if s.nc == nil {
		return skip("no NATS connection (see nats)")
	}
	cmd := roleCommand(role)
	regrant := fmt.Sprintf("grant it in the server's users.conf (aerie auth init --out DIR writes the %s's; aerie server --auth-dir grants it itself), then reload nats-server", role)
	info, err := userInfo(ctx, s.nc)
	if errors.Is(err, errInboxDenied) {
		// No reply can reach this connection: the checks after this one
		// skip rather than wait for answers that cannot come.
		s.inboxDenied = true
		// Replies to the role's inbox cannot arrive: ask again from the
		// inbox of each other role, to learn whose credentials these are.
		info, err = s.userInfoAs(ctx, role)
		if err != nil {
			return fail(regrant, "%s credentials may not subscribe to %s.>: %s %s", role, auth.InboxPrefix(role), role, purpose(need{subject: auth.InboxPrefix(role) + ".>", sub: true}))
		}
	}
	switch {
	case errors.Is(err, errInfoDenied):
		return warn("run aerie auth init --out DIR again (it keeps the seeds and rewrites users.conf) and reload nats-server",
			"not checked: these credentials may not publish %s, so the server does not say what they may do (a users.conf written before aerie doctor checked permissions)", auth.UserInfoSubject)
	case err != nil:
		return warn("", "not checked: the server did not say what these credentials may do (%v; a server without a system account does not answer %s)", err, auth.UserInfoSubject)
	}
	s.granted, s.grantedKnown = info.Permissions, true
	who := "user " + orUnknown(info.UserID)
	if info.UserID == "" {
		who = "no user"
	}
	if info.Permissions == nil {
		return pass("%s in account %s: the server sets no permissions, every subject is open", who, info.Account)
	}
	miss, err := missing(role, info.Permissions)
	if err != nil {
		return fail("use --role producer, worker, aggregator or admin", "%v", err)
	}
	if len(miss) == 0 {
		if role != auth.Admin && allows(info.Permissions, need{subject: ">"}) && allows(info.Permissions, need{subject: ">", sub: true}) {
			return warn(fmt.Sprintf("give %s its own key, %s.nk (aerie auth init), so that it can do its job and nothing past it", cmd, role),
				"%s may do everything, as the admin role: more than %s needs", who, cmd)
		}
		return pass("%s: every permission %s needs is granted", who, cmd)
	}
	var others []string
	for _, r := range auth.Roles {
		if r == role || r == auth.Admin {
			continue
		}
		if m, err := missing(r, info.Permissions); err == nil && len(m) == 0 {
			others = append(others, string(r))
		}
	}
	lines := make([]string, len(miss))
	for i, n := range miss {
		lines[i] = fmt.Sprintf("may not %s %s: the %s %s", n.verb(), n.subject, role, purpose(n))
	}
	if len(others) > 0 {
		other := others[0]
		return fail(fmt.Sprintf("use the %s's key (%s.nk) for %s, or check these for %s with --role %s", role, role, cmd, roleCommand(auth.Role(other)), other),
			"these are the %s's credentials, not the %s's: %s", strings.Join(others, "'s or the "), role, strings.Join(firstN(lines, 3), "; "))
	}
	return fail(regrant, "%s credentials %s", role, strings.Join(firstN(lines, 5), "; "))
}

// userInfoAs asks for the user info from the inbox of each role other
// than role, on a connection of its own, until one answers.
func (s *session) userInfoAs(ctx context.Context, role auth.Role) (*server.UserInfo, error) {
	err := errInboxDenied
	for _, r := range auth.Roles {
		if r == role {
			continue
		}
		opts := append(s.connectOptions(ctx), nats.CustomInboxPrefix(auth.InboxPrefix(r)))
		nc, cerr := nats.Connect(s.cfg.NATSURL, opts...)
		if cerr != nil {
			return nil, cerr
		}
		info, ierr := userInfo(ctx, nc)
		nc.Close()
		if ierr == nil {
			return info, nil
		}
		if !errors.Is(ierr, errInboxDenied) {
			err = ierr
		}
	}
	return nil, err
}

// firstN is lines, cut to n with a count of the rest.
func firstN(lines []string, n int) []string {
	if len(lines) <= n {
		return lines
	}
	return append(lines[:n:n], fmt.Sprintf("and %d more", len(lines)-n))
}

// mayPublish reports whether the credentials may publish subj: by what
// the server said, or else by what the role is granted, or, with no role
// given, yes. Checks use it to leave alone what the role may not see,
// rather than wait for a request the server drops.
func (s *session) mayPublish(subj string) bool {
	if s.grantedKnown {
		return allows(s.granted, need{subject: subj})
	}
	if s.cfg.Role == "" {
		return true
	}
	p, err := auth.Permissions(s.cfg.Role)
	if err != nil {
		return true
	}
	return allows(p, need{subject: subj})
}
