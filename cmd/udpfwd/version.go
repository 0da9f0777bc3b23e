package main

import (
	"fmt"

	"github.com/gsoplane/gsoplane/internal/buildinfo"
)

// version is the one-line version: module version, VCS revision
// ("+dirty" for uncommitted changes) and time, Go.
func version() string {
	b := buildinfo.Read()
	s := b.Version
	if s == "" {
		s = "unknown"
	}
	if b.Revision != "" {
		s += " " + b.Revision
		if b.Modified {
			s += "+dirty"
		}
	}
	if b.RevisionTime != "" {
		s += " " + b.RevisionTime
	}
	return fmt.Sprintf("%s %s", s, b.Go)
}
