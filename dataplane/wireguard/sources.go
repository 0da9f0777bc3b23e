package wireguard

import (
	"net/netip"
	"sync"
	"time"
)

// Under load, each source may have its handshake messages handled at
// SourceRate a second, after a burst of SourceBurst, as WireGuard's other
// implementations allow: a source is an IPv4 address, or an IPv6 /64 (what
// one host is usually given). Only messages whose MAC2 is valid for their
// source are counted, so a source is an address that received a cookie.
const (
	SourceRate  = 20
	SourceBurst = 5
	// MaxSources bounds the sources remembered at once; past it, a new
	// source is refused until a remembered one has been quiet for a
	// second.
	MaxSources = 1 << 14
)

const (
	sourceCost  = int64(time.Second / SourceRate) // one message, in nanoseconds of credit
	sourceCap   = SourceBurst * sourceCost        // the burst
	sourceSweep = int64(time.Second)              // a source quiet this long has its burst back: forgotten
)

// sourceLimiter is a token bucket per source, in nanoseconds of credit.
type sourceLimiter struct {
	mu      sync.Mutex
	buckets map[netip.Addr]sourceBucket
	swept   int64 // mono time of the last sweep
}

type sourceBucket struct {
	credit, last int64
}

// allow reports whether a handshake message from src may be handled at
// mono time m, and charges it.
func (l *sourceLimiter) allow(src netip.Addr, m int64) bool {
	key := sourceKey(src)
	l.mu.Lock()
	defer l.mu.Unlock()
	if m-l.swept >= sourceSweep {
		l.sweep(m)
	}
	b, ok := l.buckets[key]
	switch {
	case ok:
		b.credit = min(b.credit+m-b.last, sourceCap)
	case len(l.buckets) >= MaxSources:
		return false
	default:
		b.credit = sourceCap
	}
	b.last = m
	if b.credit < sourceCost {
		l.buckets[key] = b
		return false
	}
	b.credit -= sourceCost
	l.buckets[key] = b
	return true
}

// sweep forgets the sources quiet for sourceSweep: their buckets are
// full again, as a new source's.
func (l *sourceLimiter) sweep(m int64) {
	l.swept = m
	for k, b := range l.buckets {
		if m-b.last >= sourceSweep {
			delete(l.buckets, k)
		}
	}
}

// sourceKey is the source src is counted as: its IPv4 address (also when
// mapped into IPv6), or its IPv6 /64.
func sourceKey(src netip.Addr) netip.Addr {
	src = src.Unmap()
	if src.Is4() {
		return src
	}
	p, _ := src.WithZone("").Prefix(64)
	return p.Addr()
}
