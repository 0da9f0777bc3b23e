package icmp

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/icmperr"
	"github.com/gsoplane/gsoplane/internal/iphdr"
)

// Stats counts what a Replier did.
type Stats struct {
	Sent    uint64 // errors written
	Limited uint64 // errors not sent: over the rate limits
	Silent  uint64 // packets a router does not answer (an ICMP error, a multicast source, IPv4 without DF that a router would fragment) or without a source address of their family
	Failed  uint64 // errors the writer refused
}

// Add adds o's counters to s.
func (s *Stats) Add(o Stats) {
	s.Sent += o.Sent
	s.Limited += o.Limited
	s.Silent += o.Silent
	s.Failed += o.Failed
}

// Replier is a frame.Replier that writes ICMP and ICMPv6 errors through
// a frame.Writer, such as the TUN device the dropped packets came from,
// rate-limited as Linux limits its own errors (icmp_msgs_per_sec,
// icmp_ratelimit). The
// errors come from src4 or src6, the gateway's address on the TUN's
// link: a router's address, not the host's own (the host drops a packet
// from its own address as a martian).
type Replier struct {
	w          frame.Writer
	hdrSize    int
	src4, src6 netip.Addr
	lim        *icmperr.Limiter

	mu   sync.Mutex
	buf  []byte
	bufs [][]byte

	sent, limited, silent, failed atomic.Uint64
}

// NewReplier returns a Replier writing to w, whose packets start with
// a virtio-net header of hdrSize bytes (0 for none), from src4 (IPv4)
// and src6 (IPv6); a family without a valid address is not answered.
func NewReplier(w frame.Writer, hdrSize int, src4, src6 netip.Addr) *Replier {
	r := &Replier{
		w: w, hdrSize: hdrSize, src4: src4, src6: src6,
		lim: icmperr.NewLimiter(icmperr.LinuxLimits(), 0, nil),
		buf: make([]byte, hdrSize+icmperr.MaxLen),
	}
	r.bufs = [][]byte{nil}
	return r
}

// Unreachable answers pkt with ICMP host unreachable (ICMPv6 address
// unreachable).
func (r *Replier) Unreachable(pkt []byte) { r.reply(pkt, icmperr.Unreachable, 0) }

// TooBig answers pkt with ICMP fragmentation needed (IPv4 with DF set)
// or ICMPv6 packet too big, carrying mtu.
func (r *Replier) TooBig(pkt []byte, mtu int) { r.reply(pkt, icmperr.TooBig, mtu) }

// TimeExceeded answers pkt with ICMP time exceeded, TTL exceeded in
// transit (ICMPv6 time exceeded, hop limit exceeded in transit).
func (r *Replier) TimeExceeded(pkt []byte) { r.reply(pkt, icmperr.TimeExceeded, 0) }

func (r *Replier) reply(pkt []byte, k icmperr.Kind, mtu int) {
	src := r.src6
	if iphdr.Version(pkt) == 4 {
		src = r.src4
	}
	if !src.IsValid() {
		r.silent.Add(1)
		return
	}
	if !icmperr.Answers(pkt, k) {
		r.silent.Add(1)
		return
	}
	if !r.lim.Allow(pkt, k) {
		r.limited.Add(1)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.buf[:r.hdrSize]) // no offload: a plain packet
	n := icmperr.Build(r.buf[r.hdrSize:], pkt, src, k, mtu)
	if n == 0 {
		r.silent.Add(1)
		return
	}
	r.bufs[0] = r.buf[:r.hdrSize+n]
	// Counted before the write: the kernel delivers the error inside it,
	// and whoever it reaches may look at the counters at once.
	r.sent.Add(1)
	if _, err := r.w.Write(r.bufs, 0); err != nil {
		r.sent.Add(^uint64(0))
		r.failed.Add(1)
	}
}

// Stats returns a snapshot of the counters.
func (r *Replier) Stats() Stats {
	return Stats{Sent: r.sent.Load(), Limited: r.limited.Load(), Silent: r.silent.Load(), Failed: r.failed.Load()}
}
