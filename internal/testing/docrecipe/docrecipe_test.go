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

func TestExcerpt(t *testing.T) {
	recipe := "func main() {\n\tx := 1\n\n\tif x > 0 {\n\t\tprint(x)\n\t}\n}\n"
	for _, ok := range []string{"", "x := 1\n", "\tx := 1\n\tif x > 0 {\n", "x := 1\n\nprint(x)\n}\n", "func main() {\n}"} {
		if err := Excerpt(ok, recipe); err != nil {
			t.Errorf("Excerpt(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"x := 2\n", "print(x)\nx := 1\n", "x := 1\nx := 1\n", "x :=\n"} {
		if err := Excerpt(bad, recipe); err == nil {
			t.Errorf("Excerpt(%q) = nil, want an error", bad)
		}
	}
}
