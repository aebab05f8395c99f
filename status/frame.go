package status

import (
	"context"
	"encoding/json"
	"io"

	"github.com/nats-io/nats.go/jetstream"
)

// Frame returns a function that gathers and writes one status: of run,
// or with run empty of every run; as text, or as JSON (indented, or one
// line with compact, for a watch that writes one document per frame: a
// frame that fails is then {"error": "..."}, so that every line a script
// reads is JSON).
func Frame(js jetstream.JetStream, run string, asJSON, compact bool, opts Options) func(context.Context, io.Writer) error {
	draw := frame(js, run, asJSON, compact, opts)
	if !asJSON || !compact {
		return draw
	}
	return func(ctx context.Context, w io.Writer) error {
		err := draw(ctx, w)
		if err == nil || ctx.Err() != nil {
			return err
		}
		return json.NewEncoder(w).Encode(struct {
			Error string `json:"error"`
		}{err.Error()})
	}
}

func frame(js jetstream.JetStream, run string, asJSON, compact bool, opts Options) func(context.Context, io.Writer) error {
	encode := func(w io.Writer, v any) error {
		enc := json.NewEncoder(w)
		if !compact {
			enc.SetIndent("", "  ")
		}
		return enc.Encode(v)
	}
	if run == "" {
		return func(ctx context.Context, w io.Writer) error {
			lines, err := List(ctx, js, opts)
			if err != nil {
				return err
			}
			if asJSON {
				return encode(w, lines)
			}
			return WriteList(w, lines)
		}
	}
	return func(ctx context.Context, w io.Writer) error {
		st, err := Gather(ctx, js, run, opts)
		if err != nil {
			return err
		}
		if asJSON {
			return encode(w, st)
		}
		return WriteRun(w, st)
	}
}
