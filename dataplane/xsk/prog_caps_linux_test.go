package xsk

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// TestXDPProgramLoadsWithBPFCaps loads both programs, without and with
// frags, from a thread whose only capabilities are CAP_NET_ADMIN and
// CAP_BPF, as a binary with file capabilities gets them: without
// CAP_PERFMON (or CAP_SYS_ADMIN) the verifier refuses a helper's read of
// stack the program has not written and a comparison of pointers other
// than packet pointers, which it allows root.
func TestXDPProgramLoadsWithBPFCaps(t *testing.T) {
	netlab.RequireRoot(t)
	for _, frags := range []bool{false, true} {
		err := netlab.WithCaps(1<<unix.CAP_NET_ADMIN|1<<unix.CAP_BPF, func() error {
			p, err := newXDPProgram(progQueues - 1)
			if err != nil {
				return err
			}
			defer p.close()
			p.setReceive(rxFrameLen(DefaultFrameSize), frags)
			return p.load(progMACA)
		})
		if err != nil {
			t.Errorf("frags %v: %v", frags, err)
		}
	}
}
