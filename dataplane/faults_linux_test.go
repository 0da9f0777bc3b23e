package dataplane

import (
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/gsoplane/gsoplane/dataplane/tun"
	"github.com/gsoplane/gsoplane/dataplane/xsk"
	"github.com/gsoplane/gsoplane/internal/netlab"
)

// TestGatewayLinkFlap takes the NIC down and up again under a TCP stream:
// the gateway keeps running (a down link is not an error), holds what it
// cannot send, and the stream finishes with every byte intact.
func TestGatewayLinkFlap(t *testing.T) {
	lab := newGwLab(t, GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true, GRO: true})
	nic := lab.A.LinkT(t, netlab.NICA)
	flapped := make(chan error, 1)
	go func() {
		time.Sleep(150 * time.Millisecond) // the stream is under way
		err := lab.A.Netlink().LinkSetDown(nic)
		time.Sleep(300 * time.Millisecond)
		flapped <- errors.Join(err, lab.A.Netlink().LinkSetUp(nic))
	}()
	tcpTransfer(t, lab, labSrv4, 256<<20, false)
	netlab.Must(t, <-flapped)
	st := lab.g.Stats()
	t.Logf("NIC %+v, forward drops %v, kicks retried %d", st.NIC, st.Forward.Drops, st.XSK[0].KickRetries+st.XSK[1].KickRetries)
	if st.NIC.Downs != 1 || !st.NIC.Up {
		t.Errorf("NIC stats %+v: want one down, and up now", st.NIC)
	}
	if st.Forward.Drops.Total() != 0 {
		t.Errorf("the gateway dropped %v while the link was down", st.Forward.Drops)
	}
	if err := lab.stop(); err != nil {
		t.Fatalf("the gateway failed: %v", err)
	}
}

// TestGatewayDetached detaches the gateway's XDP program from outside (as
// bpftool link detach does): by default the gateway attaches it again
// and traffic from the NIC flows; with DetachStop, Run stops with an
// error saying so.
func TestGatewayDetached(t *testing.T) {
	t.Run("reattach", func(t *testing.T) {
		lab := newGwLab(t, GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true, GRO: true})
		detachOutside(t, lab)
		deadline := time.Now().Add(3 * xdpCheckEvery)
		for lab.g.Stats().NIC.Reattaches == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		tcpTransfer(t, lab, labSrv4, 8<<20, true) // B to A: through the XDP program
		if st := lab.g.Stats().NIC; st.Detaches != 1 || st.Reattaches != 1 || !st.XDPAttached {
			t.Errorf("NIC stats %+v: want one detach, one reattach", st)
		}
	})
	t.Run("stop", func(t *testing.T) {
		lab := newGwLab(t, GatewayConfig{TUN: tun.Config{Offload: true}, Backpressure: true, OnDetach: DetachStop})
		detachOutside(t, lab)
		select {
		case err := <-lab.done:
			if !errors.Is(err, xsk.ErrDetached) {
				t.Errorf("Run = %v, want an error wrapping ErrDetached", err)
			}
			lab.done <- nil // for the cleanup's stop
		case <-time.After(3 * xdpCheckEvery):
			t.Fatal("the gateway did not stop")
		}
	})
}

// detachOutside detaches the gateway's XDP link by its ID, from another
// handle, as another tool would.
func detachOutside(t *testing.T, lab *gwLab) {
	t.Helper()
	id := lab.A.LinkT(t, netlab.NICA).Attrs().Xdp.ProgId
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err == nil && info.Program == ebpf.ProgramID(id) && info.XDP() != nil {
			netlab.Must(t, it.Link.Detach())
			return
		}
	}
	t.Fatalf("no BPF link holds XDP program %d (%v)", id, it.Err())
}
