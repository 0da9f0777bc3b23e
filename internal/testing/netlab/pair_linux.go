package netlab

import (
	"errors"
	"net/netip"
)

// Pair is two namespaces joined by a veth of MTU 1500 ("pair-a" in A,
// "pair-b" in B), each end with an IPv4 and an IPv6 address: the two
// hosts of a tunnel's outer network, for the tunnel tests, the examples'
// and the bench.
type Pair struct {
	A, B         *NS
	AddrA, AddrB netip.Addr // IPv4
	Addr6A       netip.Addr // IPv6
	Addr6B       netip.Addr
}

// The pair's veth ends and addresses.
const (
	PairLinkA = "pair-a"
	PairLinkB = "pair-b"
)

var (
	pairAddrA  = netip.MustParseAddr("198.18.100.1")
	pairAddrB  = netip.MustParseAddr("198.18.100.2")
	pairAddr6A = netip.MustParseAddr("2001:2:100::1")
	pairAddr6B = netip.MustParseAddr("2001:2:100::2")
)

// NewPair creates the pair; Close removes it.
func NewPair(tag string) (p *Pair, err error) {
	p = &Pair{AddrA: pairAddrA, AddrB: pairAddrB, Addr6A: pairAddr6A, Addr6B: pairAddr6B}
	if p.A, err = New(tag); err != nil {
		return nil, err
	}
	if p.B, err = New(tag); err != nil {
		p.A.Close()
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if err := AddVeth(p.A, PairLinkA, p.B, PairLinkB, 0); err != nil {
		return nil, err
	}
	for _, a := range []struct {
		ns   *NS
		link string
		cidr string
	}{
		{p.A, PairLinkA, p.AddrA.String() + "/24"}, {p.B, PairLinkB, p.AddrB.String() + "/24"},
		{p.A, PairLinkA, p.Addr6A.String() + "/64"}, {p.B, PairLinkB, p.Addr6B.String() + "/64"},
	} {
		if err := a.ns.AddAddr(a.link, a.cidr); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Close removes both namespaces (and so the veth).
func (p *Pair) Close() error {
	return errors.Join(p.A.Close(), p.B.Close())
}

// NewPairT creates the pair for a test and removes it in t.Cleanup. It
// skips the test unless root.
func NewPairT(t TB, tag string) *Pair {
	t.Helper()
	RequireRoot(t)
	p, err := NewPair(tag)
	return closeInCleanup(t, p, err)
}
