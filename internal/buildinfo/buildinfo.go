// Package buildinfo reads what a gsoplane binary knows of its own build
// (module version, VCS revision and time, Go version), for udpfwd's
// -version and metrics and the bench's reports.
package buildinfo

import "runtime/debug"

// Info is a binary's build. A field the build did not record is empty:
// go run builds have no module version, and a build with -buildvcs=false
// (or outside a VCS checkout) none of the VCS fields.
type Info struct {
	Module       string `json:"module"`
	Version      string `json:"version"`
	Revision     string `json:"revision"`
	RevisionTime string `json:"revision_time"`
	Modified     bool   `json:"modified"`
	Go           string `json:"-"`
}

// Read returns the running binary's build.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{}
	}
	i := Info{Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.RevisionTime = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is the build in a line, such as "(devel), revision 648a899abcde
// (modified)" or "v1.2.0, no VCS revision".
func (i Info) String() string {
	s := i.Version
	if s == "" {
		s = "unknown version"
	}
	if i.Revision == "" {
		return s + ", no VCS revision"
	}
	s += ", revision " + i.Revision[:min(12, len(i.Revision))]
	if i.Modified {
		s += " (modified)"
	}
	return s
}
