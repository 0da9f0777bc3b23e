package buildinfo

import (
	"runtime"
	"testing"
)

func TestString(t *testing.T) {
	for i, want := range map[Info]string{
		{Version: "v1.2.0"}: "v1.2.0, no VCS revision",
		{Version: "(devel)", Revision: "648a899abcdef0123", Modified: true}: "(devel), revision 648a899abcde (modified)",
		{}: "unknown version, no VCS revision",
	} {
		if got := i.String(); got != want {
			t.Errorf("%+v: %q, want %q", i, got, want)
		}
	}
}

func TestRead(t *testing.T) {
	if i := Read(); i.Go != runtime.Version() || i.Module == "" {
		t.Errorf("Read() = %+v", i)
	}
}
