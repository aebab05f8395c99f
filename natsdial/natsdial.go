// Package natsdial connects to NATS, waiting for a server that does not
// answer yet: a command started while its server restarts, or before the
// cluster is up, waits for it instead of exiting, and a supervisor's
// restart loop is not what keeps a run alive.
package natsdial

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/aerie-dev/aerie/auth"
)

// DefaultWait is how long a command waits for its NATS server by
// default: a server restarting, or a cluster electing its leaders, is
// back well within it.
const DefaultWait = 2 * time.Minute

// LogEvery is how often a wait says what it waits for.
const LogEvery = 10 * time.Second

// The back-off between attempts: from firstBackoff, doubling, to
// maxBackoff.
const (
	firstBackoff = 250 * time.Millisecond
	maxBackoff   = 5 * time.Second
)

// Dial connects to urls (comma separated) with opts. While no server
// answers it tries again, with a back-off, for up to wait, logging to
// log every LogEvery what it waits for (nil: nothing is logged); a wait
// of 0 tries once. A server that answers and refuses (credentials, TLS)
// fails at once: waiting would not change its answer. The error after
// the wait is the last attempt's, with how long it waited. ctx ending
// stops the wait.
func Dial(ctx context.Context, urls string, wait time.Duration, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	start := time.Now()
	backoff := firstBackoff
	lastLog := start
	opts = append([]nats.Option{nats.ErrorHandler(asyncErrors(log))}, opts...)
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(urls, opts...)
		if err == nil {
			if attempt > 1 && log != nil {
				log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted(), "waited", time.Since(start).Round(time.Second))
			}
			return nc, nil
		}
		waited := time.Since(start)
		if wait <= 0 || Refused(err) {
			return nil, err
		}
		if waited+backoff > wait {
			return nil, fmt.Errorf("%w (waited %s for a server to answer, --connect-wait)", err, waited.Round(time.Second))
		}
		if log != nil && (attempt == 1 || time.Since(lastLog) >= LogEvery) {
			log.Warn("waiting for NATS", "url", Redact(urls), "err", err, "waited", waited.Round(time.Second), "connect_wait", wait)
			lastLog = time.Now()
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (stopped waiting for NATS: %w)", err, context.Cause(ctx))
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Refused reports whether err is a server's refusal rather than the lack
// of a server: credentials it does not accept, a TLS handshake that
// fails, a secure connection required or not offered.
func Refused(err error) bool {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) ||
		errors.Is(err, nats.ErrNkeysNotSupported) || errors.Is(err, nats.ErrInvalidArg) {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"authorization violation", "authentication", "x509", "certificate", "tls:", "nkey"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Redact hides the user information (user, password or token) of each
// URL in a comma-separated list, so that a log or a report can name the
// server; a URL that cannot be read but holds an @ is hidden whole.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if u, err := url.Parse(p); err == nil && u.User != nil {
			u.User = nil
			p = strings.Replace(u.String(), "://", "://[redacted]@", 1)
		} else if err != nil && strings.Contains(p, "@") {
			p = "[unparseable URL]"
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// asyncErrors logs the errors the server sends outside any request (a
// permission refused, a slow consumer) to log (nil: slog's default)
// instead of nats.go's own lines on stderr, leaving out the refusals
// auth.CheckRole asks for on purpose. A caller's nats.ErrorHandler
// option replaces it.
func asyncErrors(log *slog.Logger) nats.ErrHandler {
	if log == nil {
		log = slog.Default()
	}
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if strings.Contains(err.Error(), "."+auth.RoleCheckToken) {
			return
		}
		args := []any{"err", err}
		if sub != nil {
			args = append(args, "subject", sub.Subject)
		}
		log.Warn("NATS server error", args...)
	}
}
