package xsk

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

// TestGeneratorConfig checks that bad configurations are refused before
// any system call.
func TestGeneratorConfig(t *testing.T) {
	eth := make([]byte, 60)
	for _, c := range []struct {
		name string
		cfg  GeneratorConfig
	}{
		{"no interface", GeneratorConfig{Frames: [][]byte{eth}}},
		{"no frames", GeneratorConfig{Ifname: "lo"}},
		{"short eth", GeneratorConfig{Ifname: "lo", Frames: [][]byte{eth, eth[:13]}}},
		{"long eth", GeneratorConfig{Ifname: "lo", Frames: [][]byte{make([]byte, 2049)}, FrameSize: 2048}},
		{"negative batch", GeneratorConfig{Ifname: "lo", Frames: [][]byte{eth}, Batch: -1}},
		{"batch over the ring", GeneratorConfig{Ifname: "lo", Frames: [][]byte{eth}, RingSize: 64, Batch: 65}},
		{"negative queue", GeneratorConfig{Ifname: "lo", Frames: [][]byte{eth}, Queue: -1}},
		{"odd frame count", GeneratorConfig{Ifname: "lo", Frames: [][]byte{eth}, NumFrames: 7}},
	} {
		if g, err := OpenGenerator(c.cfg); !errors.Is(err, frame.ErrInvalidConfig) {
			t.Errorf("%s: got %v, want ErrInvalidConfig", c.name, err)
			if g != nil {
				g.Close()
			}
		}
	}
}

// TestGenerator sends prebuilt UDP frames of 16 flows from veth-b and
// checks that the peer's stack receives them intact, that Send wakes the
// kernel at most about once per batch, and that a closed generator says
// so.
func TestGenerator(t *testing.T) {
	n := newXDPNet(t) // skips unless root
	dst := netip.AddrPortFrom(netip.MustParseAddr(xdpGW4), xdpUDPPort)
	srv := n.gw.ListenUDP(t, dst)
	const flows, payload, want = 16, 64, 2000
	frames := make([][]byte, flows)
	for i := range frames {
		p := make([]byte, payload)
		binary.BigEndian.PutUint16(p, uint16(i))
		src := netip.AddrPortFrom(netip.MustParseAddr(xdpPeer4), uint16(40000+i))
		frames[i] = progUDP(n.macA, n.macB, src, dst, 64, p)
	}
	var g *Generator
	var err error
	n.peer.Do(t, func() {
		if _, err = OpenGenerator(GeneratorConfig{Ifname: xdpIfB, Queue: 2, Frames: frames}); err == nil {
			t.Error("queue 2 of a 2-queue veth: no error")
		}
		g, err = OpenGenerator(GeneratorConfig{Ifname: xdpIfB, Frames: frames, NumFrames: 256, RingSize: 64})
	})
	if err != nil {
		t.Fatalf("OpenGenerator: %v", err)
	}
	t.Cleanup(func() { g.Close() })

	got := make(chan [flows]int, 1)
	go func() {
		var seen [flows]int
		buf := make([]byte, 2048)
		srv.SetReadDeadline(time.Now().Add(xdpWait))
		for total := 0; total < want; total++ {
			k, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				break
			}
			i := int(binary.BigEndian.Uint16(buf))
			if k != payload || i >= flows || from.Port() != uint16(40000+i) {
				t.Errorf("datagram of %d bytes from %v, flow %d", k, from, i)
				break
			}
			seen[i]++
		}
		got <- seen
	}()
	// Paced, so that the receiving socket keeps up (what it drops is not
	// the generator's doing).
	var sends uint64
	for start := time.Now(); g.Stats().Completed < 2*want && time.Since(start) < xdpWait; sends++ {
		k, err := g.Send()
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		if k == 0 {
			if err := g.Wait(10 * time.Millisecond); err != nil {
				t.Fatalf("Wait: %v", err)
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	seen := <-got
	total := 0
	for i, c := range seen {
		total += c
		if c == 0 {
			t.Errorf("nothing from flow %d", i)
		}
	}
	st := g.Stats()
	t.Logf("received %d; stats %+v", total, st)
	if total < want {
		t.Errorf("received %d datagrams, want %d", total, want)
	}
	if st.KickErrors > 0 || st.BadFrames > 0 || st.TXInvalid > 0 {
		t.Errorf("kick errors %d, bad frames %d, invalid TX descriptors %d", st.KickErrors, st.BadFrames, st.TXInvalid)
	}
	if st.Kicks > 2*sends || st.Kicks*8 > st.TX {
		t.Errorf("%d wake-ups for %d frames in %d sends: want at most two a send, and many frames each", st.Kicks, st.TX, sends)
	}

	if err := g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := g.Send(); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if err := g.Wait(time.Millisecond); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after Close: %v, want ErrClosed", err)
	}
}
