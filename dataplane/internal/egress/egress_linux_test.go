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

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/dataplane/internal/nexthop"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

var (
	peer   = netip.MustParseAddr("198.18.120.2")  // on eg-a's link, answers
	peer2  = netip.MustParseAddr("198.18.120.3")  // the peer's other address
	late   = netip.MustParseAddr("198.18.120.9")  // on eg-a's link, the peer's once a test gives it
	nobody = netip.MustParseAddr("198.18.120.77") // on eg-a's link, no host
	group  = netip.MustParseAddr("224.0.0.5")     // multicast: not routed
)

// labFrames is the lab's sink's frames: QueueLen for each of 4
// destinations may wait.
const labFrames = 4 * QueueLen * QueueShare

// retrans is the lab's ARP retransmission time: the kernel gives up on a
// neighbour after one solicitation that long.
const retrans = 300 * time.Millisecond

// lab is a Layer on eg-a (198.18.120.1/24) in one namespace, whose veth
// peer eg-b (.2) is in another; ARP gives up on nobody after one
// solicitation, retrans later.
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
			return gw.Sysctl("net/ipv4/neigh/eg-a/retrans_time_ms", strconv.FormatInt(retrans.Milliseconds(), 10))
		},
	} {
		netlab.Must(t, step())
	}
	a := gw.LinkT(t, "eg-a").Attrs()
	l := &lab{gw: gw, other: other, mac: a.HardwareAddr, peerMAC: other.LinkT(t, "eg-b").Attrs().HardwareAddr}
	netlab.Must(t, gw.Run(func() (err error) {
		l.layer, err = New(Config{Ifname: a.Name, Ifindex: a.Index, MAC: a.HardwareAddr, Frames: labFrames})
		return err
	}))
	t.Cleanup(func() { l.layer.Close(&wire{}) })
	return l
}

// wire is a sink's side of the loop in memory: it takes what it is given,
// refuses the frame with ID bad in Check, stops after one frame of a
// Send if stop, and keeps at most keepMax frames at once if not 0. It
// records the IDs of the frames sent (kept ones too), discarded, kept
// and released.
type wire struct {
	sent, discarded, kept, released []uint64
	bad                             uint64
	stop                            bool
	keepMax                         int
}

var errBad = errors.New("bad frame")

func (w *wire) Check(frames []frame.Frame) (int, error) {
	for i, f := range frames {
		if f.ID == w.bad {
			return i, errBad
		}
	}
	return len(frames), nil
}

func (w *wire) Packet(f frame.Frame) (eth, pkt []byte) {
	return f.Buf[:nexthop.EtherLen], f.Buf[nexthop.EtherLen : nexthop.EtherLen+f.Len]
}

func (w *wire) Send(frames []frame.Frame) (int, bool, error) {
	if w.stop {
		frames = frames[:1]
	}
	for _, f := range frames {
		w.sent = append(w.sent, f.ID)
	}
	return len(frames), w.stop, nil
}

func (w *wire) SendKept(frames []frame.Frame) (int, bool, error) {
	for _, f := range frames {
		if !slices.Contains(w.kept, f.ID) || slices.Contains(w.released, f.ID) {
			panic("SendKept of a frame not kept")
		}
	}
	return w.Send(frames)
}

func (w *wire) Discard(f frame.Frame) { w.discarded = append(w.discarded, f.ID) }

func (w *wire) Keep(f frame.Frame) bool {
	if w.keepMax > 0 && len(w.kept)-len(w.released) >= w.keepMax { // nothing sent kept here
		return false
	}
	w.kept = append(w.kept, f.ID)
	return true
}

func (w *wire) Release(f frame.Frame) { w.released = append(w.released, f.ID) }

// frames returns a frame per destination, IDs from 1, each an IPv4
// header (an invalid Addr: a packet that is not IP).
func frames(dsts ...netip.Addr) []frame.Frame {
	fs := make([]frame.Frame, len(dsts))
	for i, dst := range dsts {
		buf := make([]byte, nexthop.EtherLen+20)
		if dst.IsValid() {
			buf[nexthop.EtherLen] = 0x45
			copy(buf[nexthop.EtherLen+16:], dst.AsSlice())
		}
		fs[i] = frame.Frame{Buf: buf, Len: 20, ID: uint64(i + 1)}
	}
	return fs
}

// transmit transmits fs until all are taken, for at most two seconds;
// it returns the error that stopped it.
func (l *lab) transmit(t *testing.T, w *wire, fs []frame.Frame) error {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); len(fs) > 0; {
		n, err := l.layer.Transmit(fs, w)
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d frames not taken", len(fs))
		}
		fs = fs[n:]
	}
	return nil
}

// drain works off the queue, as the sink loop does when its Backlog is
// ready, until done or for at most five seconds.
func (l *lab) drain(t *testing.T, w *wire, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !done(); {
		backlog := l.layer.Backlog()
		if backlog == nil {
			t.Fatalf("nothing queued, and not done: sent %v, kept %v, released %v", w.sent, w.kept, w.released)
		}
		select {
		case <-backlog:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("not done in time: sent %v, kept %v, released %v", w.sent, w.kept, w.released)
		}
		if _, err := l.layer.Transmit(nil, w); err != nil {
			t.Fatal(err)
		}
	}
}

// empty reports whether nothing is queued.
func (l *lab) empty() bool { return l.layer.Backlog() == nil }

// unreachables counts Unreachable calls.
type unreachables struct{ n atomic.Int64 }

func (u *unreachables) Unreachable([]byte)  { u.n.Add(1) }
func (u *unreachables) TooBig([]byte, int)  { panic("TooBig from a link layer") }
func (u *unreachables) TimeExceeded([]byte) { panic("TimeExceeded from a link layer") }

// TestTransmit sends through the kernel's next hops: frames to a
// neighbour that answers get its address, frames without a next hop are
// dropped and counted by reason, and the sink's check and stop end the
// batch.
func TestTransmit(t *testing.T) {
	l := newLab(t)
	var replies unreachables
	l.layer.SetReplier(&replies)
	l.resolve(t, peer)

	w := &wire{}
	fs := frames(peer, group, peer, netip.Addr{}, peer)
	netlab.Must(t, l.transmit(t, w, fs))
	if want := []uint64{1, 3, 5}; !slices.Equal(w.sent, want) {
		t.Errorf("sent %v, want %v", w.sent, want)
	}
	if want := []uint64{2, 4}; !slices.Equal(w.discarded, want) || len(w.kept) != 0 {
		t.Errorf("discarded %v, kept %v, want %v dropped", w.discarded, w.kept, want)
	}
	for _, f := range []frame.Frame{fs[0], fs[2], fs[4]} {
		if eth := f.Buf[:nexthop.EtherLen]; !bytes.Equal(eth[:6], l.peerMAC) || !bytes.Equal(eth[6:12], l.mac) || eth[12] != 0x08 || eth[13] != 0 {
			t.Errorf("frame %d: Ethernet header % x, want %v from %v, IPv4", f.ID, eth, l.peerMAC, l.mac)
		}
	}
	d := l.layer.Drops()
	if d[frame.DropNotRouted] != 1 || d[frame.DropUnresolved] != 1 || replies.n.Load() != 1 {
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

// resolve has the layer resolve dst, as the first frame to it does.
func (l *lab) resolve(t *testing.T, dst netip.Addr) {
	t.Helper()
	w := &wire{}
	netlab.Must(t, l.transmit(t, w, frames(dst)))
	l.drain(t, w, l.empty)
	if !slices.Equal(w.sent, []uint64{1}) {
		t.Fatalf("%v did not resolve: sent %v, released %v", dst, w.sent, w.released)
	}
}

// TestQueue: frames whose next hop is being resolved wait while the
// others go; once the kernel gives up, they are dropped, counted as
// unresolved and their senders answered.
func TestQueue(t *testing.T) {
	l := newLab(t)
	var replies unreachables
	l.layer.SetReplier(&replies)
	l.resolve(t, peer)
	w := &wire{}
	start := time.Now()
	if n, err := l.layer.Transmit(frames(nobody, peer, nobody, peer), w); n != 4 || err != nil {
		t.Fatalf("Transmit: took %d, %v; want all, the frames to nobody queued", n, err)
	}
	if !slices.Equal(w.sent, []uint64{2, 4}) || !slices.Equal(w.kept, []uint64{1, 3}) || len(w.released) != 0 {
		t.Fatalf("sent %v, kept %v, released %v; want the frames to the peer sent, the others kept", w.sent, w.kept, w.released)
	}
	l.drain(t, w, l.empty)
	t.Logf("dropped after %v", time.Since(start))
	if d := l.layer.Drops(); d[frame.DropUnresolved] != 2 || !slices.Equal(w.released, []uint64{1, 3}) || replies.n.Load() != 2 {
		t.Errorf("drops %v, released %v, replies %d; want the frames to nobody dropped as unresolved, and answered", d, w.released, replies.n.Load())
	}
}

// TestQueueLate: frames to a neighbour that answers late go out once it
// has, in order, before the next ones to it; the others never waited.
func TestQueueLate(t *testing.T) {
	l := newLab(t)
	netlab.Must(t, l.gw.Sysctl("net/ipv4/neigh/eg-a/mcast_solicit", "3"))
	l.resolve(t, peer)
	w := &wire{}
	if n, err := l.layer.Transmit(frames(late, late, peer), w); n != 3 || err != nil || !slices.Equal(w.sent, []uint64{3}) {
		t.Fatalf("Transmit: took %d, %v, sent %v; want all taken, the frame to the peer sent", n, err, w.sent)
	}
	time.Sleep(retrans / 3) // the first solicitation goes unanswered
	netlab.Must(t, l.other.AddAddr("eg-b", late.String()+"/24"))
	for deadline := time.Now().Add(5 * time.Second); len(w.sent) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("sent %v, released %v; want the late frames sent", w.sent, w.released)
		}
		backlog := l.layer.Backlog()
		if backlog == nil {
			t.Fatalf("sent %v, released %v: nothing queued", w.sent, w.released)
		}
		<-backlog
		next := frames(late)
		next[0].ID = 4
		if _, err := l.layer.Transmit(next, w); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(w.sent[:4], []uint64{3, 1, 2, 4}) || len(w.released) != 0 || l.layer.Drops() != (frame.Drops{}) {
		t.Errorf("sent %v, released %v, drops %v; want 1 and 2 sent once resolved, before the next one", w.sent, w.released, l.layer.Drops())
	}
}

// TestQueueBounds: a destination queues QueueLen frames, the oldest
// dropped to make room, and a QueueShare of the sink's frames are queued
// in all, the next dropped, as is one the sink cannot spare; Close drops
// what is still queued. Every frame dropped is counted.
func TestQueueBounds(t *testing.T) {
	l := newLab(t)
	dst := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 120, byte(100 + i)}) }
	var dsts []netip.Addr
	for i := range labFrames / QueueShare / QueueLen {
		for range QueueLen {
			dsts = append(dsts, dst(i))
		}
		if i == 0 {
			dsts = append(dsts, dst(0)) // one more to the first
		}
	}
	dsts = append(dsts, dst(labFrames/QueueShare/QueueLen)) // past the bound
	w := &wire{}
	if n, err := l.layer.Transmit(frames(dsts...), w); n != len(dsts) || err != nil {
		t.Fatalf("took %d of %d, %v", n, len(dsts), err)
	}
	last := uint64(len(dsts))
	if !slices.Equal(w.released, []uint64{1}) || !slices.Equal(w.discarded, []uint64{last}) || len(w.kept) != len(dsts)-1 || len(w.sent) != 0 {
		t.Errorf("released %v (want the first destination's oldest, 1), discarded %v (want the one past the bound, %d), kept %d of %d, sent %v",
			w.released, w.discarded, last, len(w.kept), len(dsts), w.sent)
	}
	l.layer.Close(w)
	if d := l.layer.Drops(); d[frame.DropUnresolved] != uint64(len(dsts)) || len(w.released)+len(w.discarded) != len(dsts) {
		t.Errorf("after Close: drops %v, released %d, discarded %d; want all %d dropped", d, len(w.released), len(w.discarded), len(dsts))
	}

	l = newLab(t) // a sink that keeps 2 frames
	w = &wire{keepMax: 2}
	if n, err := l.layer.Transmit(frames(nobody, nobody, nobody), w); n != 3 || err != nil || !slices.Equal(w.kept, []uint64{1, 2}) || !slices.Equal(w.discarded, []uint64{3}) {
		t.Errorf("took %d, %v, kept %v, discarded %v; want 1 and 2 kept, 3 dropped", n, err, w.kept, w.discarded)
	}
}

// TestLinkDown takes nothing while the link is down and waits the whole
// time it is given, and waits for nothing once the link is up again.
func TestLinkDown(t *testing.T) {
	l := newLab(t)
	w := &wire{}
	l.layer.SetLinkUp(false)
	if n, err := l.layer.Transmit(frames(peer), w); n != 0 || err != nil || len(w.sent)+len(w.kept) != 0 {
		t.Errorf("link down: took %d (%v)", n, err)
	}
	start := time.Now()
	if !l.layer.Wait(20*time.Millisecond) || time.Since(start) < 20*time.Millisecond {
		t.Errorf("link down: Wait returned after %v", time.Since(start))
	}
	l.layer.SetLinkUp(true)
	start = time.Now()
	if l.layer.Wait(time.Second) || time.Since(start) > 500*time.Millisecond { // at once, not the second: slack for a busy machine
		t.Errorf("link up: Wait waited %v", time.Since(start))
	}
}

// TestLinkFlap: a frame whose next hop began resolving while the link
// was going down (the kernel deletes the link's neighbours before the
// link's monitor hears it is down) is sent once the link is up again,
// not dropped, although the kernel's resolution failed meanwhile (its
// solicitation was lost on the down link): the resolution starts afresh.
func TestLinkFlap(t *testing.T) {
	l := newLab(t)
	nic := l.gw.LinkT(t, "eg-a")
	netlab.Must(t, l.gw.Netlink().LinkSetDown(nic))
	w := &wire{}
	if n, err := l.layer.Transmit(frames(peer), w); n != 1 || err != nil || len(w.kept) != 1 {
		t.Fatalf("Transmit to a new next hop: took %d, %v, kept %v; want the frame queued", n, err, w.kept)
	}
	// The resolver asks the kernel, which solicits on the down link.
	for deadline := time.Now().Add(5 * time.Second); !l.kernelHas(t, peer); {
		if time.Now().After(deadline) {
			t.Fatal("the kernel was not asked to resolve the next hop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.layer.SetLinkUp(false)
	time.Sleep(retrans + 200*time.Millisecond) // down past the kernel's failure
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
	l.drain(t, w, l.empty)
	t.Logf("sent %v after the link came up", time.Since(up))
	if d := l.layer.Drops(); d[frame.DropUnresolved] != 0 || !slices.Equal(w.sent, []uint64{1}) {
		t.Errorf("drops %v, sent %v, released %v; want the frame sent", d, w.sent, w.released)
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
