package main_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readmeMarker comes right before each README block that the README
// tests run, and names it.
const readmeMarker = "<!-- readme-test: "

// readmeBlock is one fenced block of README.md.
type readmeBlock struct {
	name    string // from the marker before it; "" without one
	line    int    // of the opening fence, 1-based
	lang    string // after the fence: "sh", "json", ""
	section string // the ## heading it is under
	sub     string // the ### heading it is under, "" when none
	text    string // between the fences, with a final newline
}

// readmeTestedSections are the README's sections whose every shell
// block runs in TestREADMEProductionPath (or, for inspect-commands,
// TestInspectREADME too): ## headings, and ### headings under other
// sections.
var readmeTestedSections = []string{
	"Production",
	"Watching a run",
	"Inspecting a run with the nats CLI",
	"Exporting for a trainer or a batch tool",
	"Producing EAGLE-3 drafter data",
	"Failures",
}

// readmeBlockNames are the blocks the README tests run, in the order
// they appear in the README.
var readmeBlockNames = []string{
	"auth-init", "tls", "client-env", "doctor", "run", "one-machine", "cluster",
	"status", "nats-context", "nats-inspect", "inspect-commands", "export", "eagle3", "extract", "replay",
}

// parseREADMEBlocks returns every fenced block of a README in order.
func parseREADMEBlocks(src string) []readmeBlock {
	var (
		blocks       []readmeBlock
		section, sub string
		marker       string
		cur          *readmeBlock
	)
	for i, line := range strings.Split(src, "\n") {
		if cur != nil {
			if strings.HasPrefix(line, "```") {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.text += line + "\n"
			continue
		}
		switch {
		case strings.HasPrefix(line, "```"):
			cur = &readmeBlock{name: marker, line: i + 1, lang: strings.TrimPrefix(line, "```"), section: section, sub: sub}
		case strings.HasPrefix(line, "## "):
			section, sub = strings.TrimPrefix(line, "## "), ""
		case strings.HasPrefix(line, "### "):
			sub = strings.TrimPrefix(line, "### ")
		}
		marker = ""
		if name, ok := strings.CutPrefix(line, readmeMarker); ok {
			marker = strings.TrimSuffix(name, " -->")
		}
	}
	return blocks
}

// tested reports whether a block lies in a section whose shell blocks
// must all be run.
func (b readmeBlock) tested() bool {
	return slices.Contains(readmeTestedSections, b.section) || slices.Contains(readmeTestedSections, b.sub)
}

// readmeDocs are the files the README's reference moved to, in the
// order it had them: the README tests read their blocks wherever they
// now are.
var readmeDocs = []string{
	"rehearsal.md", "production.md", "watching.md", "nats-cli.md", "input.md", "output.md",
	"eagle3.md", "hidden-states.md", "failures.md", "events.md", "guarantees.md", "layout.md",
}

// readDocs returns README.md followed by readmeDocs, each of those with
// its headings one level down (its title a section, as it was in the
// README), so that sections and blocks read as one document.
func readDocs(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.Write(src)
	for _, name := range readmeDocs {
		doc, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		fence := false
		for _, line := range strings.Split(string(doc), "\n") {
			if strings.HasPrefix(line, "```") {
				fence = !fence
			}
			if !fence && strings.HasPrefix(line, "#") {
				line = "#" + line
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// readREADMEBlocks returns the named blocks of the README and the
// documents its reference moved to, by name.
func readREADMEBlocks(t *testing.T) map[string]readmeBlock {
	t.Helper()
	src := readDocs(t)
	named := map[string]readmeBlock{}
	for _, b := range parseREADMEBlocks(src) {
		if b.name != "" {
			named[b.name] = b
		}
	}
	return named
}

// Every shell block of the sections the README test covers is named
// and run: a block added there without a marker, a marker whose block
// the test does not run, or a block the test runs that is gone fails
// here, without building anything.
func TestREADMEBlocksAreAllRun(t *testing.T) {
	src := readDocs(t)
	var names []string
	for _, b := range parseREADMEBlocks(src) {
		if b.name != "" {
			names = append(names, b.name)
			continue
		}
		if b.tested() && b.lang == "sh" {
			t.Errorf("a shell block in %q (line %d of README.md and docs/ read as one) has no %s...--> marker: name it and run it in TestREADMEProductionPath", b.section, b.line, readmeMarker)
		}
	}
	if !slices.Equal(names, readmeBlockNames) {
		t.Errorf("README.md names the blocks %q, the README tests run %q: a block was added, renamed, moved or removed; update readmeBlockNames and the test that runs it", names, readmeBlockNames)
	}
}

func TestParseREADMEBlocks(t *testing.T) {
	src := "# x\n## Production\ntext\n" + readmeMarker + "a -->\n```sh\necho 1\n```\n### Sub\n```json\n{}\n```\n## Other\n```sh\necho 2\n```\n"
	got := parseREADMEBlocks(src)
	want := []readmeBlock{
		{name: "a", line: 5, lang: "sh", section: "Production", text: "echo 1\n"},
		{line: 9, lang: "json", section: "Production", sub: "Sub", text: "{}\n"},
		{line: 13, lang: "sh", section: "Other", text: "echo 2\n"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if !got[0].tested() || !got[1].tested() || got[2].tested() {
		t.Error("tested(): want the Production blocks only")
	}
}
