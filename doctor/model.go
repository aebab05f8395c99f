package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/aerie-dev/aerie/openai"
)

// RequireModel asks the backend which models it serves and returns nil if
// model is one of them. Otherwise the error names the served models and
// the --model to pass instead. Run it before queuing a run's prompts: a
// run queued for a model its backend does not serve is stuck, because
// every worker refuses to start, and its manifest binds the run name to
// that model. where names the backend in the error (its URL, or "the
// built-in simulator"). Without a deadline on ctx the check gives up
// after DefaultCheckTimeout.
func RequireModel(ctx context.Context, backend *openai.Client, where, model string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCheckTimeout)
		defer cancel()
	}
	models, err := backend.Models(ctx)
	var api *openai.APIError
	if errors.As(err, &api) && (api.Status == http.StatusUnauthorized || api.Status == http.StatusForbidden) {
		return fmt.Errorf("check that %s serves model %q: %w: the server wants the API key it was started with (vLLM's --api-key): give it with --api-key-file FILE or AERIE_API_KEY", where, model, err)
	}
	if err != nil {
		return fmt.Errorf("check that %s serves model %q: %w", where, model, err)
	}
	ids := modelIDs(models)
	switch {
	case len(ids) == 0:
		return fmt.Errorf("%s serves no model, so it cannot generate with %q: wait until it has loaded its model, or point --backend at a server of %q", where, model, model)
	case !slices.Contains(ids, model):
		return fmt.Errorf("%s does not serve model %q; it serves %s: pass --model %s", where, model, quoteList(ids, 10), suggestModel(ids))
	}
	return nil
}

func modelIDs(models []openai.Model) []string {
	ids := make([]string, len(models))
	for i, m := range models {
		ids[i] = m.ID
	}
	return ids
}

// suggestModel is what to pass as --model among the served ids: the
// only one, or a placeholder when there are several.
func suggestModel(ids []string) string {
	if len(ids) == 1 {
		return ids[0]
	}
	return "<one of them>"
}
