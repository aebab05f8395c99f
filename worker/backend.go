package worker

import (
	"context"

	"github.com/aerie-dev/aerie/openai"
)

// A worker asks of its backend only that it answers chats (Backend);
// what else a backend can do, the worker finds out by asking for the
// interfaces below, each of which *openai.Client implements: a backend
// that cannot tell is not asked.

// Backend is what a worker needs of an LLM server. *openai.Client
// implements it.
type Backend interface {
	ChatStream(ctx context.Context, req openai.ChatRequest, progress openai.Progress) (*openai.Completion, error)
}

var _ Backend = (*openai.Client)(nil)

// baseURLer is implemented by backends that can say where they send
// requests (*openai.Client does).
type baseURLer interface {
	BaseURL() string
}

// metricsReader is implemented by backends that can read their server's
// Prometheus metrics (*openai.Client does).
type metricsReader interface {
	ServerMetrics(ctx context.Context) ([]byte, error)
}

// modelLister is implemented by backends that can say what they serve
// (*openai.Client does). Backends that cannot are not checked.
type modelLister interface {
	Models(ctx context.Context) ([]openai.Model, error)
}

// keyReloader is implemented by backends that read their API key from a
// file (*openai.Client with a key file): a paused worker re-reads it, so
// that fixing the file resumes the worker without a restart.
type keyReloader interface {
	ReloadAPIKey() (changed bool, err error)
}

// healthChecker is implemented by backends with a health endpoint
// (*openai.Client: GET /health).
type healthChecker interface {
	Health(ctx context.Context) error
}
