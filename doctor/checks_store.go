package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/aerie-dev/aerie/provision"
)

// messageOverhead is what JetStream stores per message beyond its
// payload, and the headers aerie sets: subject, Nats-Msg-Id, schema.
const messageOverhead = 256

// storeNeed is what a run is expected to store in JetStream, part by
// part, with how each was counted.
type storeNeed struct {
	prompts, results, turns uint64
	how                     []string
}

func (n storeNeed) total() uint64 { return n.prompts + n.results + n.turns }

func (n storeNeed) String() string {
	parts := fmt.Sprintf("prompts %s, results %s", formatBytes(n.prompts), formatBytes(n.results))
	if n.turns > 0 {
		parts += fmt.Sprintf(", turns %s", formatBytes(n.turns))
	}
	return fmt.Sprintf("about %s (%s; %s)", formatBytes(n.total()), parts, strings.Join(n.how, ", "))
}

// storeNeed estimates what the rest of the run stores: every prompt
// message (the prompts file's size, or none counted without it), every
// result (its prompt again, and its answer at max_tokens x
// bytesPerOutputToken, or assumedTokens when unset) and, with --turns
// all, every earlier turn's answer. ok is false when the count of
// prompts is unknown.
func (s *session) storeNeed() (storeNeed, bool) {
	size, ok := s.size()
	if !ok || size.units == 0 {
		return storeNeed{}, false
	}
	var need storeNeed
	promptBytes := s.promptBytes()
	if promptBytes > 0 {
		need.how = append(need.how, fmt.Sprintf("%s a prompt as in %s", formatBytes(promptBytes), s.cfg.PromptsFile))
	} else {
		need.how = append(need.how, "prompts' own size unknown (no --prompts)")
	}
	answer, answerHow := s.answerBytes()
	need.how = append(need.how, fmt.Sprintf("%s x %s", size, answerHow))
	units, requests := uint64(size.units), uint64(size.requests)
	need.prompts = units * (promptBytes + messageOverhead)
	// A result holds its prompt and its answer; with --turns all, every
	// turn's answer.
	need.results = units*(promptBytes+messageOverhead) + requests*answer
	if requests > units {
		// The earlier turns wait in the turns stream until their
		// conversation's result is stored.
		extra := requests - units
		need.turns = extra * (promptBytes + answer + messageOverhead)
		need.how = append(need.how, fmt.Sprintf("%d earlier turns", extra))
	}
	return need, true
}

// probePrefix starts the names of the probe streams.
const probePrefix = "AERIE_DOCTOR_PROBE_"

// maxProbes bounds the streams checkStoreSpace creates to learn what the
// server can still reserve.
const maxProbes = 12

// checkStoreSpace compares what the run is expected to store in
// JetStream with the room the store has left, and warns with the
// numbers when it does not fit. The room is the account's max_store
// less what it stores, when the account has a limit; otherwise what the
// server (its max_file_store, less what streams reserve) lets a stream
// reserve, learned by creating and removing small probe streams that
// reserve bytes, less what the account stores. A cluster does not check
// reservations against its nodes' stores, so there the room is unknown.
func checkStoreSpace(ctx context.Context, s *session) Result {
	if s.js == nil {
		return skip("no JetStream (see jetstream)")
	}
	need, ok := s.storeNeed()
	if !ok {
		return skip("the run's size is unknown (no consumer, manifest or prompts file to count)")
	}
	info, err := s.js.AccountInfo(ctx)
	if err != nil {
		return fail("check that these credentials may use JetStream (nats account info)", "JetStream account info: %v", err)
	}
	stored := info.Store
	var room uint64
	var where string
	switch {
	case info.Limits.MaxStore > 0:
		room = uint64(info.Limits.MaxStore) - min(uint64(info.Limits.MaxStore), stored)
		where = fmt.Sprintf("the account's max_store of %s less the %s it stores", formatBytes(uint64(info.Limits.MaxStore)), formatBytes(stored))
	case s.nc.ConnectedClusterName() != "":
		return pass("the run stores %s; room not checked: in a cluster each node's store (max_file_store) must hold it, which clients cannot see", need)
	case !s.mayPublish(jetstream.DefaultAPIPrefix + "STREAM.CREATE." + probePrefix):
		return skip("the run stores %s; room not checked: learning it takes creating a stream, which these credentials may not (the admin key may)", need)
	default:
		reservable, fits, err := probeReservable(ctx, s.js, need.total()+stored)
		if err != nil {
			return skip("cannot learn the store's room: %v (the admin key may create streams; the other roles may not)", err)
		}
		if fits {
			return pass("the run stores %s; the store can still reserve more than that beyond the %s stored", need, formatBytes(stored))
		}
		room = reservable - min(reservable, stored)
		where = fmt.Sprintf("what the server's max_file_store lets a stream reserve (%s) less the %s stored", formatBytes(reservable), formatBytes(stored))
	}
	if need.total() > room {
		return warn("give the server a larger max_file_store (or the account a larger max_store), free space with aerie runs rm of finished runs, or split the prompts into runs that fit; when the store fills, workers and the producer pause until there is room",
			"the run stores %s; the store has about %s left: %s", need, formatBytes(room), where)
	}
	return pass("the run stores %s; the store has about %s left: %s", need, formatBytes(room), where)
}

// probeReservable reports whether the server lets a stream reserve want
// bytes; when it does not, it returns about how much it would let it
// reserve (within an eighth, at most maxProbes probes). Each probe is a
// stream created with MaxBytes and deleted at once.
func probeReservable(ctx context.Context, js jetstream.JetStream, want uint64) (reservable uint64, fits bool, err error) {
	ok, err := reserves(ctx, js, want)
	if err != nil || ok {
		return want, ok, err
	}
	lo, hi := uint64(0), want // lo can be reserved, hi cannot
	for probes := 1; probes < maxProbes && hi-lo > hi/8; probes++ {
		mid := lo + (hi-lo)/2
		ok, err := reserves(ctx, js, mid)
		if err != nil {
			return 0, false, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, false, nil
}

// reserves creates a stream that reserves size bytes and deletes it,
// and reports whether the server allowed it.
func reserves(ctx context.Context, js jetstream.JetStream, size uint64) (bool, error) {
	if size == 0 {
		return true, nil
	}
	name := probePrefix + strings.ReplaceAll(uuid.NewString(), "-", "")
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{"_aerie_doctor_probe." + name},
		Storage: jetstream.FileStorage, MaxBytes: int64(min(size, 1<<62)), Replicas: 1,
	})
	if err != nil {
		if provision.IsNoRoom(err) {
			return false, nil
		}
		return false, fmt.Errorf("create a probe stream: %w", err)
	}
	if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return true, fmt.Errorf("remove the probe stream %s: %w (remove it with: nats stream rm %s -f)", name, err, name)
	}
	return true, nil
}
