package privs

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestCapsString: capabilities by their kernel names in bit order, a bit
// without a name in hex, none; every capability x/sys/unix knows has its
// name.
func TestCapsString(t *testing.T) {
	for _, c := range []struct {
		caps Caps
		want string
	}{
		{0, "none"},
		{1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_BIND_SERVICE, "CAP_NET_BIND_SERVICE,CAP_NET_ADMIN"},
		{1 << unix.CAP_CHOWN, "CAP_CHOWN"},
		{1<<unix.CAP_CHECKPOINT_RESTORE | 1<<63, "CAP_CHECKPOINT_RESTORE,0x8000000000000000"},
	} {
		if got := c.caps.String(); got != c.want {
			t.Errorf("Caps(%#x).String() = %q, want %q", uint64(c.caps), got, c.want)
		}
	}
	if len(capNames) != unix.CAP_LAST_CAP+1 {
		t.Errorf("%d names, want %d (CAP_LAST_CAP %d)", len(capNames), unix.CAP_LAST_CAP+1, unix.CAP_LAST_CAP)
	}
}

// TestCapsRead: the sets a process reads of itself; the effective set is
// within the permitted one.
func TestCapsRead(t *testing.T) {
	eff, err := Effective()
	if err != nil {
		t.Fatal(err)
	}
	prm, err := Permitted()
	if err != nil {
		t.Fatal(err)
	}
	if eff&^prm != 0 {
		t.Errorf("effective %s beyond permitted %s", eff, prm)
	}
}
