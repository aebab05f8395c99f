// Package auth defines aerie's four roles (producer, worker, aggregator,
// admin) as NATS permissions with least privilege, the nkey seed files
// that identify them, and the nats-server users block that enforces them.
//
// Every permission is computed from the stream, subject, consumer and
// bucket names in package schema, so renaming a stream there changes the
// permissions here. Each role replies on its own inbox prefix
// (InboxPrefix) and may subscribe only there (plus heartbeats for the
// aggregator), so one role cannot read another's JetStream replies.
package auth

import (
	"fmt"
	"sort"
	"strings"

	"github.com/aerie-dev/aerie/schema"
	"github.com/nats-io/nats-server/v2/server"
)

// Role is one of aerie's four roles. The zero value is not a role.
type Role string

// The roles, in the order their seed files are written.
const (
	Producer   Role = "producer"
	Worker     Role = "worker"
	Aggregator Role = "aggregator"
	Admin      Role = "admin"
)

// Roles lists every role.
var Roles = []Role{Producer, Worker, Aggregator, Admin}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("role %q is not known: use producer, worker, aggregator or admin", s)
}

// InboxPrefix is the reply-subject prefix a client of role r must set
// (nats.CustomInboxPrefix); r may subscribe only below it.
func InboxPrefix(r Role) string { return "_INBOX_" + string(r) }

const api = "$JS.API."

// UserInfoSubject is where a client asks the server for its own user and
// permissions (nats-server answers it itself, without side effects).
// Every role may ask, so that aerie doctor can say which permission a
// command lacks.
const UserInfoSubject = "$SYS.REQ.USER.INFO"

// kvStream is the stream behind a KV bucket.
func kvStream(bucket string) string { return "KV_" + bucket }

// kvSubjects is the subject space of a KV bucket's keys.
func kvSubjects(bucket string) string { return "$KV." + bucket + ".>" }

// read lets a role look at streams: their info, single messages by
// sequence or last-by-subject, directly or through the leader.
func read(streams ...string) []string {
	var s []string
	for _, st := range streams {
		s = append(s,
			api+"STREAM.INFO."+st,
			api+"STREAM.MSG.GET."+st,
			api+"DIRECT.GET."+st,
			api+"DIRECT.GET."+st+".>",
		)
	}
	return s
}

// pull lets a role create (or look up) consumers on stream, fetch from
// them and acknowledge what it fetched. NATS wildcards match whole subject
// tokens only, so a role cannot be held to consumers whose names start
// with one prefix (aggregator-...): it gets every consumer of the stream.
func pull(stream string) []string {
	return []string{
		api + "CONSUMER.CREATE." + stream + ".*",
		api + "CONSUMER.CREATE." + stream + ".*.>",
		api + "CONSUMER.DURABLE.CREATE." + stream + ".*",
		api + "CONSUMER.INFO." + stream + ".*",
		api + "CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.ACK." + stream + ".>",
	}
}

// watch lets a role watch a KV bucket: an ordered consumer created and
// deleted on the bucket's stream, whose flow control it answers.
func watch(bucket string) []string {
	st := kvStream(bucket)
	return []string{
		api + "CONSUMER.CREATE." + st + ".*.>",
		api + "CONSUMER.DELETE." + st + ".*",
		"$JS.FC." + st + ".>",
	}
}

// aerieStreams are every stream aerie provisions, KV buckets included.
func aerieStreams() []string {
	return []string{
		schema.PromptsStream, schema.ResultsStream, schema.DeadStream,
		schema.EventsStream, schema.AdvisoriesStream, schema.TurnsStream,
		kvStream(schema.RunsBucket), kvStream(schema.AttemptsBucket), kvStream(schema.LeasesBucket),
	}
}

// Permissions returns what role r may publish and subscribe to. Admin may
// do everything.
func Permissions(r Role) (*server.Permissions, error) {
	var pub, sub []string
	inbox := InboxPrefix(r) + ".>"
	switch r {
	case Admin:
		pub, sub = []string{">"}, []string{">"}
	case Producer:
		// Provisioning: every aerie stream and bucket, created or updated
		// (provision.Streams and the bucket functions), and the run's workers
		// consumer (provision.WorkersConsumer).
		pub = append(pub, api+"INFO")
		for _, st := range aerieStreams() {
			pub = append(pub, api+"STREAM.CREATE."+st, api+"STREAM.UPDATE."+st)
		}
		pub = append(pub, read(aerieStreams()...)...)
		pub = append(pub,
			api+"CONSUMER.CREATE."+schema.PromptsStream+".*",
			api+"CONSUMER.CREATE."+schema.PromptsStream+".*.>",
			api+"CONSUMER.DURABLE.CREATE."+schema.PromptsStream+".*",
			api+"CONSUMER.INFO."+schema.PromptsStream+".*",
			schema.PromptsRoot+".>",
			kvSubjects(schema.RunsBucket),
		)
		sub = []string{inbox}
	case Worker:
		pub = append(pub, api+"INFO")
		pub = append(pub,
			api+"CONSUMER.INFO."+schema.PromptsStream+".*",
			api+"CONSUMER.MSG.NEXT."+schema.PromptsStream+".*",
			"$JS.ACK."+schema.PromptsStream+".>",
		)
		// The events stream tells a worker when its run is done.
		pub = append(pub, read(schema.PromptsStream, schema.ResultsStream, schema.DeadStream, schema.TurnsStream, schema.EventsStream,
			kvStream(schema.RunsBucket), kvStream(schema.AttemptsBucket))...)
		pub = append(pub, watch(schema.RunsBucket)...)
		pub = append(pub,
			// A --turns all worker creates the turns stream when an older
			// producer did not, and drops a conversation's stored turns
			// (by subject) once its result is published.
			api+"STREAM.CREATE."+schema.TurnsStream,
			api+"STREAM.PURGE."+schema.TurnsStream,
			schema.ResultsRoot+".>",
			schema.DeadRoot+".>",
			schema.TurnsRoot+".>",
			schema.EventsRoot+".*.heartbeat.*",
			schema.EventsRoot+".*.hedge.*",
			kvSubjects(schema.AttemptsBucket),
		)
		// The other workers' heartbeats say which are idle at the end of
		// a run (worker/tail.go), and their hedge notices which copy of a
		// hedged request was stored first (worker/hedge.go).
		sub = []string{inbox, schema.EventsRoot + ".*.heartbeat.*", schema.EventsRoot + ".*.hedge.*"}
	case Aggregator:
		pub = append(pub, api+"INFO")
		pub = append(pub, watch(schema.RunsBucket)...)
		// The run is done when the workers' consumer has nothing pending.
		pub = append(pub, api+"CONSUMER.INFO."+schema.PromptsStream+".*")
		pub = append(pub, pull(schema.ResultsStream)...)
		pub = append(pub, pull(schema.DeadStream)...)
		pub = append(pub, pull(schema.AdvisoriesStream)...)
		pub = append(pub, read(schema.PromptsStream, schema.ResultsStream, schema.DeadStream, schema.TurnsStream,
			schema.EventsStream, schema.AdvisoriesStream, kvStream(schema.RunsBucket), kvStream(schema.LeasesBucket))...)
		pub = append(pub,
			schema.EventsRoot+".>",
			schema.DeadRoot+".>",
			kvSubjects(schema.LeasesBucket),
		)
		sub = []string{inbox, schema.EventsRoot + ".*.heartbeat.*"}
	default:
		return nil, fmt.Errorf("role %q is not known: use producer, worker, aggregator or admin", r)
	}
	if r != Admin {
		pub = append(pub, UserInfoSubject)
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: dedupe(pub)},
		Subscribe: &server.SubjectPermission{Allow: dedupe(sub)},
	}, nil
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// UsersConf renders a nats-server authorization block with one nkey user
// per role, keyed by public nkey, for a server configuration to include.
func UsersConf(public map[Role]string) (string, error) {
	var b strings.Builder
	b.WriteString("# aerie roles: generated by `aerie auth init`; the seeds beside this file are secret.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, r := range Roles {
		pk, ok := public[r]
		if !ok {
			return "", fmt.Errorf("no public nkey for role %s", r)
		}
		p, err := Permissions(r)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "    # %s\n    {\n      nkey: %s\n      permissions: {\n", r, pk)
		fmt.Fprintf(&b, "        publish: { allow: %s }\n", list(p.Publish.Allow))
		fmt.Fprintf(&b, "        subscribe: { allow: %s }\n", list(p.Subscribe.Allow))
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func list(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
