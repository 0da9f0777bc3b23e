package egress

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/gsoplane/gsoplane/dataplane/pipeline"
	"github.com/gsoplane/gsoplane/internal/netlab"
	"github.com/gsoplane/gsoplane/internal/nexthop"
)

var (
	peer   = netip.MustParseAddr("198.18.120.2")  // on eg-a's link, answers
	peer2  = netip.MustParseAddr("198.18.120.3")  // the peer's other address
	nobody = netip.MustParseAddr("198.18.120.77") // on eg-a's link, no host
	group  = netip.MustParseAddr("224.0.0.5")     // multicast: not routed
)

// lab is a Layer on eg-a (198.18.120.1/24) in one namespace, whose veth
// peer eg-b (.2) is in another; ARP gives up on nobody after one
// solicitation, 2 × nexthop.HoldTime later: the hold ends first.
type lab struct {
	layer   *Layer
	gw      *netlab.NS // eg-a's
	other   *netlab.NS // eg-b's
	mac     []byte     // eg-a's
	peerMAC []byte     // eg-b's
}

func newLab(t *testing.T) *lab {
	t.Helper()
	gw, other := netlab.NewT(t, "eg"), netlab.NewT(t, "eg")
	for _, step := range []func() error{
		func() error { return netlab.AddVeth(gw, "eg-a", other, "eg-b", 0) },
		func() error { return gw.AddAddr("eg-a", "198.18.120.1/24") },
		func() error { return other.AddAddr("eg-b", "198.18.120.2/24") },
		func() error { return other.AddAddr("eg-b", "198.18.120.3/24") },
		func() error { return gw.Sysctl("net/ipv4/neigh/eg-a/mcast_solicit", "1") },
		func() error {
			return gw.Sysctl("net/ipv4/neigh/eg-a/retrans_time_ms", strconv.FormatInt((2*nexthop.HoldTime).Milliseconds(), 10))
		},
	} {
		netlab.Must(t, step())
	}
	a := gw.LinkT(t, "eg-a").Attrs()
	l := &lab{gw: gw, other: other, mac: a.HardwareAddr, peerMAC: other.LinkT(t, "eg-b").Attrs().HardwareAddr}
	netlab.Must(t, gw.Run(func() (err error) {
		l.layer, err = New(Config{Ifname: a.Name, Ifindex: a.Index, MAC: a.HardwareAddr})
		return err
	}))
	t.Cleanup(l.layer.Close)
	return l
}

// wire is a sink's side of the loop in memory: it takes what it is given,
// refuses the frame with ID bad in Check and stops after one frame of a
// Send if stop.
type wire struct {
	sent, discarded []uint64
	bad             uint64
	stop            bool
}

var errBad = errors.New("bad frame")

func (w *wire) Check(frames []pipeline.Frame) (int, error) {
	for i, f := range frames {
		if f.ID == w.bad {
			return i, errBad
		}
	}
	return len(frames), nil
}

func (w *wire) Packet(f pipeline.Frame) (eth, pkt []byte) {
	return f.Buf[:nexthop.EtherLen], f.Buf[nexthop.EtherLen : nexthop.EtherLen+f.Len]
}

func (w *wire) Send(frames []pipeline.Frame) (int, bool, error) {
	if w.stop {
		frames = frames[:1]
	}
	for _, f := range frames {
		w.sent = append(w.sent, f.ID)
	}
	return len(frames), w.stop, nil
}

func (w *wire) Discard(f pipeline.Frame) { w.discarded = append(w.discarded, f.ID) }

// frames returns a frame per destination, IDs from 1, each an IPv4
// header (an invalid Addr: a packet that is not IP).
func frames(dsts ...netip.Addr) []pipeline.Frame {
	fs := make([]pipeline.Frame, len(dsts))
	for i, dst := range dsts {
		buf := make([]byte, nexthop.EtherLen+20)
		if dst.IsValid() {
			buf[nexthop.EtherLen] = 0x45
			copy(buf[nexthop.EtherLen+16:], dst.AsSlice())
		}
		fs[i] = pipeline.Frame{Buf: buf, Len: 20, ID: uint64(i + 1)}
	}
	return fs
}

// transmit transmits fs until all are taken, waiting for held frames,
// for at most two seconds; it returns the error that stopped it.
func (l *lab) transmit(t *testing.T, w *wire, fs []pipeline.Frame) error {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); len(fs) > 0; {
		n, err := l.layer.Transmit(fs, w)
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d frames not taken", len(fs))
		}
		if n == 0 && !l.layer.Wait(10*time.Millisecond) {
			t.Fatal("Transmit took nothing, and Wait did not wait")
		}
		fs = fs[n:]
	}
	return nil
}

// unreachables counts Unreachable calls.
type unreachables struct{ n atomic.Int64 }

func (u *unreachables) Unreachable([]byte)  { u.n.Add(1) }
func (u *unreachables) TooBig([]byte, int)  { panic("TooBig from a link layer") }
func (u *unreachables) TimeExceeded([]byte) { panic("TimeExceeded from a link layer") }

// TestTransmit sends through the kernel's next hops: frames to a
// neighbour that answers get its address, frames without a next hop are
// discarded and counted by reason, and the sink's check and stop end the
// batch.
func TestTransmit(t *testing.T) {
	l := newLab(t)
	var replies unreachables
	l.layer.SetReplier(&replies)

	w := &wire{}
	fs := frames(peer, group, peer, netip.Addr{}, peer)
	netlab.Must(t, l.transmit(t, w, fs))
	if want := []uint64{1, 3, 5}; !slices.Equal(w.sent, want) {
		t.Errorf("sent %v, want %v", w.sent, want)
	}
	if want := []uint64{2, 4}; !slices.Equal(w.discarded, want) {
		t.Errorf("discarded %v, want %v", w.discarded, want)
	}
	for _, f := range []pipeline.Frame{fs[0], fs[2], fs[4]} {
		if eth := f.Buf[:nexthop.EtherLen]; !bytes.Equal(eth[:6], l.peerMAC) || !bytes.Equal(eth[6:12], l.mac) || eth[12] != 0x08 || eth[13] != 0 {
			t.Errorf("frame %d: Ethernet header % x, want %v from %v, IPv4", f.ID, eth, l.peerMAC, l.mac)
		}
	}
	d := l.layer.Drops()
	if d[pipeline.DropNotRouted] != 1 || d[pipeline.DropUnresolved] != 1 || replies.n.Load() != 1 {
		t.Errorf("drops %v, replies %d; want 1 not routed, 1 unresolved (answered)", d, replies.n.Load())
	}

	w = &wire{bad: 2}
	if n, err := l.layer.Transmit(frames(peer, peer, peer), w); n != 1 || !errors.Is(err, errBad) || len(w.sent) != 1 {
		t.Errorf("a bad second frame: took %d, sent %v, %v; want the first taken and the check's error", n, w.sent, err)
	}
	w = &wire{stop: true}
	if n, err := l.layer.Transmit(frames(peer, peer, peer), w); n != 1 || err != nil {
		t.Errorf("a send that stops after one frame: took %d, %v; want 1", n, err)
	}
}

// TestHold holds a batch at a frame whose next hop is being resolved, for
// nexthop.HoldTime at most, then drops such frames (unresolved), and
// answers their senders once the kernel has given up on the neighbour.
func TestHold(t *testing.T) {
	l := newLab(t)
	var replies unreachables
	l.layer.SetReplier(&replies)
	w := &wire{}
	start := time.Now()
	if n, err := l.layer.Transmit(frames(nobody, peer), w); n != 0 || err != nil {
		t.Fatalf("first Transmit: took %d, %v; want the batch held at a pending next hop", n, err)
	}
	if !l.layer.Wait(time.Millisecond) {
		t.Fatal("Wait after a hold did not wait")
	}
	netlab.Must(t, l.transmit(t, w, frames(nobody, peer)))
	if held := time.Since(start); held < nexthop.HoldTime/2 {
		t.Errorf("held %v, want about %v", held, nexthop.HoldTime)
	}
	if d := l.layer.Drops(); d[pipeline.DropUnresolved] != 1 || !slices.Equal(w.discarded, []uint64{1}) || !slices.Equal(w.sent, []uint64{2}) {
		t.Errorf("drops %v, discarded %v, sent %v; want the frame to nobody dropped as unresolved, the other sent", d, w.discarded, w.sent)
	}
	for deadline := time.Now().Add(5 * time.Second); replies.n.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no sender answered %v after the first frame", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
		l.layer.Transmit(frames(nobody), w)
	}
}

// TestLinkDown takes nothing while the link is down and waits the whole
// time it is given, and waits for nothing once the link is up again.
func TestLinkDown(t *testing.T) {
	l := newLab(t)
	w := &wire{}
	l.layer.SetLinkUp(false)
	if n, err := l.layer.Transmit(frames(peer), w); n != 0 || err != nil || len(w.sent)+len(w.discarded) != 0 {
		t.Errorf("link down: took %d (%v)", n, err)
	}
	start := time.Now()
	if !l.layer.Wait(20*time.Millisecond) || time.Since(start) < 20*time.Millisecond {
		t.Errorf("link down: Wait returned after %v", time.Since(start))
	}
	l.layer.SetLinkUp(true)
	start = time.Now()
	if l.layer.Wait(time.Second) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("link up, nothing held: Wait waited %v", time.Since(start))
	}
}

// TestLinkFlap: a frame whose next hop began resolving while the link
// was going down (the kernel deletes the link's neighbours before the
// link's monitor hears it is down), and stays held past the hold, is sent
// once the link is up again, not dropped: the hold starts afresh, and so
// does the kernel's resolution, whose solicitation was lost on the down
// link and which would otherwise only fail, one retrans_time later.
func TestLinkFlap(t *testing.T) {
	l := newLab(t)
	nic := l.gw.LinkT(t, "eg-a")
	netlab.Must(t, l.gw.Netlink().LinkSetDown(nic))
	w := &wire{}
	if n, err := l.layer.Transmit(frames(peer), w); n != 0 || err != nil {
		t.Fatalf("Transmit to a new next hop: took %d, %v; want the frame held", n, err)
	}
	held := time.Now()
	// The resolver asks the kernel, which solicits on the down link.
	for deadline := time.Now().Add(5 * time.Second); !l.kernelHas(t, peer); {
		if time.Now().After(deadline) {
			t.Fatal("the kernel was not asked to resolve the next hop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.layer.SetLinkUp(false)
	time.Sleep(nexthop.HoldTime - time.Since(held) + 100*time.Millisecond) // down past the hold
	netlab.Must(t, l.gw.Netlink().LinkSetUp(nic))
	// Up for the link layer once frames cross it both ways, as the
	// gateway's monitor hears of it once the kernel has activated the
	// device: a solicitation or a reply sent before would be dropped, and
	// with one solicitation the resolution would fail. The kernel of the
	// gateway's side resolves another address of the peer's to tell.
	for deadline := time.Now().Add(5 * time.Second); !l.resolves(t, peer2); {
		if time.Now().After(deadline) {
			t.Fatal("the link did not come up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.layer.SetLinkUp(true)
	up := time.Now()
	netlab.Must(t, l.transmit(t, w, frames(peer)))
	t.Logf("sent %v after the link came up", time.Since(up))
	if d := l.layer.Drops(); d[pipeline.DropUnresolved] != 0 || !slices.Equal(w.sent, []uint64{1}) {
		t.Errorf("drops %v, sent %v, discarded %v; want the frame sent", d, w.sent, w.discarded)
	}
}

// resolves asks eg-a's kernel to resolve a anew and reports whether it
// has.
func (l *lab) resolves(t *testing.T, a netip.Addr) bool {
	t.Helper()
	if n, ok := l.neighbour(t, a); ok && n.State&netlink.NUD_REACHABLE != 0 {
		return true
	}
	n := &netlink.Neigh{LinkIndex: l.gw.LinkT(t, "eg-a").Attrs().Index, Family: netlink.FAMILY_V4, IP: a.AsSlice()}
	l.gw.Netlink().NeighDel(n) // a solicitation lost on the link is not sent again
	n.Flags = netlink.NTF_USE
	netlab.Must(t, l.gw.Netlink().NeighSet(n))
	return false
}

// kernelHas reports whether eg-a's neighbour table has an entry for a.
func (l *lab) kernelHas(t *testing.T, a netip.Addr) bool {
	t.Helper()
	_, ok := l.neighbour(t, a)
	return ok
}

// neighbour returns eg-a's neighbour entry for a, if there is one.
func (l *lab) neighbour(t *testing.T, a netip.Addr) (netlink.Neigh, bool) {
	t.Helper()
	ns, err := l.gw.Netlink().NeighList(l.gw.LinkT(t, "eg-a").Attrs().Index, netlink.FAMILY_V4)
	netlab.Must(t, err)
	for _, n := range ns {
		if n.IP.Equal(a.AsSlice()) {
			return n, true
		}
	}
	return netlink.Neigh{}, false
}

// TestMain fails the tests if they leave a namespace or a descriptor behind.
func TestMain(m *testing.M) { os.Exit(netlab.Main(m)) }
