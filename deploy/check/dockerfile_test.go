package check

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// parseDockerfile parses the Dockerfile at path with BuildKit's parser
// and its lint rules (those of `docker build --check`); every lint
// warning is an error.
func parseDockerfile(t *testing.T, path string) []instructions.Stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, w := range res.Warnings {
		t.Errorf("%s: parser warning: %s", path, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, desc, url, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		t.Errorf("%s:%d: lint %s: %s (%s)", path, line, rule, msg, url)
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return stages
}

var secretName = regexp.MustCompile(`(?i)(secret|password|passwd|token|api_?key|private|seed|nkey|creds|credential)`)

// TestDockerfile checks the image definition: a Go build stage that
// builds the static binary as `make build` does, a final distroless/static
// (or scratch) stage that runs it as a non-root numeric user, the OCI
// labels, and no secret in any instruction.
func TestDockerfile(t *testing.T) {
	path := filepath.Join(root, "Dockerfile")
	stages := parseDockerfile(t, path)
	if len(stages) < 2 {
		t.Fatalf("%s: %d stage(s); want a build stage and a final stage", path, len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.BaseName, "golang:") {
		t.Errorf("build stage FROM %s: want the official golang image", build.BaseName)
	}
	if build.Name == "" {
		t.Errorf("build stage has no name (FROM ... AS build)")
	}
	if !strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") && final.BaseName != "scratch" {
		t.Errorf("final stage FROM %s: want gcr.io/distroless/static* or scratch", final.BaseName)
	}
	if strings.HasPrefix(final.BaseName, "gcr.io/distroless/") && !strings.Contains(final.BaseName, ":nonroot") {
		t.Errorf("final stage FROM %s: want the :nonroot variant", final.BaseName)
	}

	// The build: CGO_ENABLED=0 go build with -trimpath and -s -w, of
	// ./cmd/aerie.
	var built bool
	for _, c := range build.Commands {
		run, ok := c.(*instructions.RunCommand)
		if !ok {
			continue
		}
		line := strings.Join(run.CmdLine, " ")
		if !strings.Contains(line, "go build") {
			continue
		}
		built = true
		words, err := shell.NewLex('\\').ProcessWords(line, shell.EnvsFromSlice(nil))
		if err != nil {
			t.Fatalf("RUN %s: %v", line, err)
		}
		if !slices.Contains(words, "CGO_ENABLED=0") {
			t.Errorf("RUN %s: want CGO_ENABLED=0 (a static binary)", line)
		}
		if !slices.Contains(words, "-trimpath") {
			t.Errorf("RUN %s: want -trimpath", line)
		}
		if i := slices.Index(words, "-ldflags"); i < 0 || i+1 >= len(words) || !strings.HasPrefix(words[i+1], "-s -w") {
			t.Errorf("RUN %s: want -ldflags \"-s -w ...\"", line)
		}
		if !slices.Contains(words, "./cmd/aerie") {
			t.Errorf("RUN %s: want ./cmd/aerie built", line)
		}
	}
	if !built {
		t.Errorf("build stage has no RUN ... go build")
	}

	// The final stage: the binary from the build stage, a numeric
	// non-root user, the binary as entrypoint, labels.
	var user string
	var entrypoint []string
	var binaryFrom string
	labels := map[string]string{}
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				t.Errorf("ENTRYPOINT %v: want the exec form (distroless has no shell)", c.CmdLine)
			}
			entrypoint = c.CmdLine
		case *instructions.CopyCommand:
			if c.DestPath == "/aerie" {
				binaryFrom = c.From
			}
		case *instructions.LabelCommand:
			for _, kv := range c.Labels {
				labels[kv.Key] = kv.Value
			}
		case *instructions.RunCommand:
			t.Errorf("final stage RUN %v: the final image has no shell", c.CmdLine)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("final stage USER %q: want a numeric non-root user (Kubernetes' runAsNonRoot verifies numbers only)", user)
	}
	if binaryFrom != build.Name {
		t.Errorf("/aerie copied from %q: want the build stage %q", binaryFrom, build.Name)
	}
	if len(entrypoint) == 0 || entrypoint[0] != "/aerie" {
		t.Errorf("ENTRYPOINT %v: want [\"/aerie\"]", entrypoint)
	}
	for _, l := range []string{"org.opencontainers.image.title", "org.opencontainers.image.source", "org.opencontainers.image.version"} {
		if labels[l] == "" {
			t.Errorf("no LABEL %s", l)
		}
	}

	// No secrets: no ENV, ARG or LABEL named like one, no key file copied.
	for _, s := range stages {
		for _, c := range s.Commands {
			switch c := c.(type) {
			case *instructions.EnvCommand:
				for _, kv := range c.Env {
					if secretName.MatchString(kv.Key) {
						t.Errorf("ENV %s: secrets do not belong in an image layer; pass them at run time", kv.Key)
					}
				}
			case *instructions.ArgCommand:
				for _, kv := range c.Args {
					if secretName.MatchString(kv.Key) {
						t.Errorf("ARG %s: build arguments are kept in the image history; use a secret mount", kv.Key)
					}
				}
			case *instructions.CopyCommand:
				for _, src := range c.SourcePaths {
					if strings.HasSuffix(src, ".nk") || strings.HasSuffix(src, ".creds") || strings.Contains(src, "auth") && c.From == "" {
						t.Errorf("COPY %s: no key material in the image", src)
					}
				}
			case *instructions.AddCommand:
				t.Errorf("ADD %v: use COPY (ADD fetches URLs and unpacks archives)", c.SourcePaths)
			}
		}
	}
}

// TestDockerignore checks that the build context leaves out what must not
// reach an image layer (role seeds, run data, .git) and keeps what the
// build needs.
func TestDockerignore(t *testing.T) {
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	for path, excluded := range map[string]bool{
		".git/config":                              true,
		"data/demo/completions.jsonl":              true,
		"deploy/kubernetes/cluster/auth/worker.nk": true,
		"somewhere/admin.nk":                       true,
		"bin/aerie":                                true,
		"go.mod":                                   false,
		"go.sum":                                   false,
		"cmd/aerie/main.go":                        false,
		"schema/names.go":                          false,
		"simulator/testdata/placeholder.json":      false,
	} {
		got, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != excluded {
			t.Errorf(".dockerignore: %s excluded %v, want %v", path, got, excluded)
		}
	}
}
