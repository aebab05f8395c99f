package main_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	mdLink    = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`^#{1,6} (.*)`)
	notSlug   = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// slug is a heading's anchor as GitHub makes it.
func slug(h string) string {
	return strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
}

// anchors lists the headings' anchors of a Markdown file, outside code.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if m := mdHeading.FindStringSubmatch(l); m != nil && !fence {
			out[slug(m[1])] = true
		}
	}
	return out
}

// Every relative link of the repository's Markdown files leads to a file
// that exists, and its #anchor to a heading of that file: the README's
// reference moved to docs/, and links into it moved with it.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "bin" || d.Name() == "data" ||
			d.Name() == "artifacts" || d.Name() == "node_modules" || rel == filepath.Join("deploy", "kubernetes", "schemas")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files", len(files))
	}
	for path, text := range files {
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Clean(filepath.Join(filepath.Dir(path), file))
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link %s: no such file", path, target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if !anchors(files[dest])[anchor] {
				t.Errorf("%s: link %s: %s has no heading #%s", path, target, dest, anchor)
			}
		}
	}
}
