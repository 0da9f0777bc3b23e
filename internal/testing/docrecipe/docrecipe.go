// Package docrecipe finds the recipes of the project's markdown files,
// for the tests that run them as written: the first fenced block of a
// language after a heading; and checks that a short quick start is an
// excerpt of a recipe a test runs. It is pure Go and imports nothing of
// the project.
package docrecipe

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Block returns the first fenced block of lang ("sh", "go") after the
// line title (a heading, "## ..." included) in the markdown file path,
// as a reader copies it.
func Block(path, title, lang string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	_, after, ok := strings.Cut(string(b), "\n"+title+"\n")
	if !ok {
		return "", fmt.Errorf("%s has no heading %q", path, title)
	}
	m := regexp.MustCompile("(?s)```" + regexp.QuoteMeta(lang) + "\n(.*?)```").FindStringSubmatch(after)
	if m == nil {
		return "", fmt.Errorf("%s: no %s block under %q", path, lang, title)
	}
	return m[1], nil
}

// Excerpt returns nil if every line of excerpt is a line of recipe, in
// the same order, with other lines allowed between them; indentation and
// blank lines do not count. Otherwise its error names the first line that
// is not.
func Excerpt(excerpt, recipe string) error {
	lines := strings.Split(recipe, "\n")
	for _, want := range strings.Split(excerpt, "\n") {
		want = strings.TrimSpace(want)
		if want == "" {
			continue
		}
		i := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == want })
		if i < 0 {
			return fmt.Errorf("%q is not a line of the recipe (after the excerpt's lines before it)", want)
		}
		lines = lines[i+1:]
	}
	return nil
}
