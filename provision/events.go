package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultEventsMaxBytes bounds the events stream on a store with room:
// weeks of heartbeats and events of a large fleet.
const DefaultEventsMaxBytes = 1 << 30

// minEventsMaxBytes is the least the events stream is given: about a day
// of a hundred workers' heartbeats.
const minEventsMaxBytes = 16 << 20

// eventsShare is the share of what the server could still reserve that
// the events stream takes on a store too small for
// DefaultEventsMaxBytes: the prompts, results and turns need the rest.
const eventsShare = 8

// createEvents creates the events stream of cfg, bounded by
// DefaultEventsMaxBytes, or on a JetStream store too small to reserve
// that (max_file_store, or the account's limit), by an eighth of what it
// can reserve, at least minEventsMaxBytes, with a warning that says so.
// A stream with MaxBytes reserves them when created; aerie's other
// streams reserve nothing and are bounded by what the store holds.
func createEvents(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, log *slog.Logger) error {
	if _, err := js.Stream(ctx, cfg.Name); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("look up stream %s: %w", cfg.Name, err)
	}
	want := int64(DefaultEventsMaxBytes)
	if info, err := js.AccountInfo(ctx); err == nil && info.Limits.MaxStore > 0 {
		want = min(want, max(info.Limits.MaxStore/eventsShare, minEventsMaxBytes))
	}
	for size := want; ; size /= 2 {
		cfg.MaxBytes = size
		_, err := js.CreateStream(ctx, cfg)
		switch {
		case err == nil:
			if size == want {
				return nil
			}
			// size fits what the server can reserve, twice it does not:
			// take a share of it, not all.
			share := max(size/eventsShare, minEventsMaxBytes)
			cfg.MaxBytes = share
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				share = size
			}
			log.Warn("the JetStream store is small: the events stream gets a share of it; give the server a larger max_file_store (or the account a larger max_store) for long runs",
				"stream", cfg.Name, "max_bytes", share, "could_reserve_about", size, "wanted", want)
			return nil
		case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
			return nil // created concurrently by another process
		case !IsNoRoom(err) || size/2 < minEventsMaxBytes:
			if IsNoRoom(err) {
				return fmt.Errorf("create stream %s: the JetStream store cannot reserve even %d MiB for aerie's events (its max_file_store, or the account's max_store, is nearly used up): free space with aerie runs rm, or give the server more: %w",
					cfg.Name, size>>20, err)
			}
			return fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	}
}

// IsNoRoom reports whether err is JetStream refusing for want of room:
// a stream that asks to reserve more than the store or the account has
// left, or a message when the store (max_file_store) or the account's
// limit is used up.
func IsNoRoom(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10023, // insufficient resources: the server's store is used up
		10047, // insufficient storage resources available: cannot reserve
		10002: // resource limits exceeded for account
		return true
	}
	return false
}
