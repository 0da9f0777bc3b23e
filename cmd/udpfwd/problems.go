package main

import (
	"fmt"
	"strings"
)

// problems collects every configuration problem, so that one error
// reports them all.
type problems []string

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

func (p *problems) merge(q problems) { *p = append(*p, q...) }

// err returns nil, or one error titled title listing the problems.
func (p problems) err(title string) error {
	switch len(p) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: %s", title, p[0])
	}
	return fmt.Errorf("%s (%d problems):\n  - %s", title, len(p), strings.Join(p, "\n  - "))
}
