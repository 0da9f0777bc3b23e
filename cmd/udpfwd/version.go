package main

import (
	"fmt"
	"runtime/debug"
)

// build is what the binary knows of its own build.
type build struct {
	Version  string // the module version, or "(devel)" in a source tree
	Revision string // VCS revision, "+dirty" when modified; "" if unknown
	Time     string // VCS commit time (RFC 3339); "" if unknown
	Go       string // the Go toolchain
}

// buildInfo reads the build information the Go toolchain embedded.
func buildInfo() build {
	b := build{Version: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Version, b.Go = bi.Main.Version, bi.GoVersion
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "" {
		b.Revision += "+dirty"
	}
	return b
}

// version is the one-line version: module version, revision, Go.
func version() string {
	b := buildInfo()
	s := b.Version
	if b.Revision != "" {
		s += " " + b.Revision
	}
	if b.Time != "" {
		s += " " + b.Time
	}
	return fmt.Sprintf("%s %s", s, b.Go)
}
