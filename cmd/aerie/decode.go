package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aerie-dev/aerie/inspect"
)

const decodeSynopsis = `[--kind K] [--compact] < message

Reads one message from stdin and writes it as JSON to stdout: prompts,
results, dead letters and stored turns are msgpack, events pass through.
Made for the nats CLI's --translate, which pipes each message body:

  nats stream view AERIE_RESULTS --translate 'aerie decode'

It also reads a message as the nats CLI prints it, headers included
(nats stream get AERIE_RESULTS 5 | aerie decode), or as its JSON
(nats stream get --json). The kind comes from the Aerie-Schema header,
else the subject, else the payload's fields.`

// maxDecodeInput bounds what decode reads: well above NATS's largest
// payload (64 MB), so that a wrong pipe ends in an error, not in memory
// exhaustion.
const maxDecodeInput = 128 << 20

func cmdDecode(_ context.Context, args []string) error {
	fs, _ := newFlags("decode", decodeSynopsis)
	kind := fs.String("kind", "", "what the message is, when neither header, subject nor payload says: "+strings.Join(inspect.Kinds, ", "))
	compact := fs.Bool("compact", false, "write one line of JSON instead of indented JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	in, err := io.ReadAll(io.LimitReader(os.Stdin, maxDecodeInput+1))
	if err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if len(in) > maxDecodeInput {
		return fmt.Errorf("stdin holds more than %d MiB: give one message", maxDecodeInput>>20)
	}
	d, err := inspect.Decode(in, *kind)
	if err != nil {
		return err
	}
	out := []byte(d.JSON)
	if !*compact {
		var buf bytes.Buffer
		if err := json.Indent(&buf, d.JSON, "", "  "); err != nil {
			return fmt.Errorf("indent %s: %w", d.Kind, err)
		}
		out = buf.Bytes()
	}
	if _, err := os.Stdout.Write(append(out, '\n')); err != nil {
		return fmt.Errorf("write stdout: %w", err)
	}
	return nil
}
