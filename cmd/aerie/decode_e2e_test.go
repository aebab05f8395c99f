package main_test

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

// aerie decode as the nats CLI runs it: a body on stdin, JSON on stdout;
// bad input ends with exit status 1 and the reason on stderr.
func TestDecodeCommand(t *testing.T) {
	bin := buildAerie(t)
	result, err := schema.EncodeResult(&schema.Result{Run: "r", ID: "q1", Content: "c", FinishReason: "length"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		in       []byte
		code     int
		out, err string
	}{
		{"result", nil, result, 0, "{\n  \"v\": 1,\n  \"run\": \"r\",\n  \"id\": \"q1\",", ""},
		{"compact", []string{"--compact"}, result, 0, `"finish_reason":"length"`, ""},
		{"event", nil, []byte(`{"run":"r"}`), 0, "{\n  \"run\": \"r\"\n}\n", ""},
		{"garbage", nil, []byte("hello"), 1, "", "aerie decode: payload is not a msgpack map"},
		{"empty", nil, nil, 1, "", "aerie decode: the message body is empty"},
		{"bad kind", []string{"--kind", "x"}, result, 1, "", `kind "x" is not one of`},
		{"stray argument", []string{"result"}, result, 1, "", "unexpected argument"},
	} {
		cmd := exec.Command(bin, append([]string{"decode"}, tc.args...)...)
		cmd.Stdin = bytes.NewReader(tc.in)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.err) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, %q, %q", tc.name, code, stdout.String(), stderr.String(), tc.code, tc.out, tc.err)
		}
		if strings.Contains(stderr.String(), "panic") {
			t.Errorf("%s panicked: %s", tc.name, stderr.String())
		}
	}
}
