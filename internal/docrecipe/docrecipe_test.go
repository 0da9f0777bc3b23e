package docrecipe

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	md := "# Doc\n\n## One\n\ntext\n\n```go\npackage main\n```\n\n```sh\necho one\n```\n\n## Two\n\n```sh\necho two\n```\n"
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ title, lang, want string }{
		{"## One", "go", "package main\n"},
		{"## One", "sh", "echo one\n"},
		{"## Two", "sh", "echo two\n"},
	} {
		if got, err := Block(path, c.title, c.lang); err != nil || got != c.want {
			t.Errorf("Block(%q, %q) = %q, %v; want %q", c.title, c.lang, got, err, c.want)
		}
	}
	for _, c := range []struct{ title, lang string }{{"## Three", "sh"}, {"## Two", "go"}, {"One", "sh"}} {
		if got, err := Block(path, c.title, c.lang); err == nil {
			t.Errorf("Block(%q, %q) = %q, want an error", c.title, c.lang, got)
		}
	}
}
