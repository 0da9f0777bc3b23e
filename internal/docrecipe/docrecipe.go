// Package docrecipe finds the recipes of the project's markdown files,
// for the tests that run them as written: the first fenced block of a
// language after a heading. It is pure Go and imports nothing of the
// project.
package docrecipe

import (
	"fmt"
	"os"
	"regexp"
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
