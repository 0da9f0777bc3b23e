package uapi

import (
	"bufio"
	"errors"
	"io"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/wireguard"
)

// A Device is what a Handler configures and shows. *wireguard.Device is
// one; a data path embeds it to bind and mark its sockets as the listen
// port and fwmark say (an error refuses the set operation: a port in
// use, syscall.EADDRINUSE, say).
type Device interface {
	PublicKey() wireguard.Key
	PrivateKey() wireguard.Key
	SetPrivateKey(wireguard.Key)
	ListenPort() uint16
	SetListenPort(uint16) error
	Fwmark() uint32
	SetFwmark(uint32) error
	Peers() []*wireguard.Peer
	PeerByKey(wireguard.Key) *wireguard.Peer
	AddPeer(wireguard.PeerConfig) (*wireguard.Peer, error)
	RemovePeer(*wireguard.Peer)
}

var _ Device = (*wireguard.Device)(nil)

// A Router is a Device that routes by its peers' allowed IPs (cryptokey
// routing): after each set operation, the Handler hands it every peer's
// allowed IPs (a peer without any is left out). An error fails the
// operation.
type Router interface {
	SetAllowedIPs(map[wireguard.Key][]netip.Prefix) error
}

// A Handler answers get and set operations for a Device and keeps its
// peers' allowed IPs: an allowed IP belongs to one peer, the last given
// it; they are shown and handed on sorted. Its methods are safe for
// concurrent use; operations run one at a time.
type Handler struct {
	dev Device
	lim Limits

	mu      sync.Mutex
	allowed map[wireguard.Key]map[netip.Prefix]struct{}
	owner   map[netip.Prefix]wireguard.Key
}

// NewHandler returns a Handler for dev, its peers without allowed IPs.
func NewHandler(dev Device, lim Limits) *Handler {
	return &Handler{
		dev:     dev,
		lim:     lim.withDefaults(),
		allowed: make(map[wireguard.Key]map[netip.Prefix]struct{}),
		owner:   make(map[netip.Prefix]wireguard.Key),
	}
}

// allowedIPs returns peer k's allowed IPs, sorted. h.mu is held.
func (h *Handler) allowedIPs(k wireguard.Key) []netip.Prefix {
	return slices.SortedFunc(maps.Keys(h.allowed[k]), netip.Prefix.Compare)
}

var errOperation = errors.New("uapi: not an operation (get=1 or set=1)")

// Handle answers the operations a client sends on rw, one after the
// other, until it closes (nil) or fails to finish one, or sends what is
// not an operation (which is answered with errno=-EPROTO).
func (h *Handler) Handle(rw io.ReadWriter) error {
	r := bufio.NewReaderSize(rw, h.lim.Line)
	for {
		op, err := readLine(r, h.lim.Line)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var answer []byte
		switch string(op) {
		case "get=1":
			if end, err := readLine(r, h.lim.Line); err != nil || len(end) != 0 {
				err = errors.Join(err, errOperation)
				rw.Write(appendErrno(nil, errorf(syscall.EPROTO, "%w", err)))
				return err
			}
			answer = AppendGet(nil, h.State())
		case "set=1":
			s, err := ParseSet(r, h.lim)
			var refused *Error
			if err != nil && !errors.As(err, &refused) {
				return err
			}
			if err == nil {
				err = h.Apply(s)
			}
			answer = appendErrno(nil, err)
		default:
			rw.Write(appendErrno(nil, errorf(syscall.EPROTO, "%w", errOperation)))
			return errOperation
		}
		if _, err := rw.Write(answer); err != nil {
			return err
		}
	}
}

// State returns the device as a get operation shows it.
func (h *Handler) State() *State {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.dev
	st := &State{PrivateKey: d.PrivateKey(), ListenPort: d.ListenPort(), Fwmark: d.Fwmark()}
	for _, p := range d.Peers() {
		got := Peer{PeerConfig: p.Config(), AllowedIPs: h.allowedIPs(p.PublicKey())}
		got.RxBytes, got.TxBytes = p.Transfer()
		if t := p.LastHandshake(); !t.IsZero() {
			got.LastHandshake = t.UnixNano()
		}
		st.Peers = append(st.Peers, got)
	}
	return st
}

// Apply makes the changes of s, the device's (private key, listen port,
// fwmark, replace_peers) and then the peers' in order, as WireGuard
// does: it stops at the first the Device refuses (an *Error), those
// before it made. The
// Device's own public key is silently skipped as a peer's.
func (h *Handler) Apply(s *Set) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.apply(s)
	for k := range h.allowed { // the peers the device removed itself
		if h.dev.PeerByKey(k) == nil {
			h.drop(k)
		}
	}
	if r, ok := h.dev.(Router); ok {
		routes := make(map[wireguard.Key][]netip.Prefix, len(h.allowed))
		for k := range h.allowed {
			routes[k] = h.allowedIPs(k)
		}
		if rerr := r.SetAllowedIPs(routes); rerr != nil && err == nil {
			err = &Error{Errno: errnoOf(rerr, syscall.EINVAL), Err: rerr}
		}
	}
	return err
}

func (h *Handler) apply(s *Set) error {
	d := h.dev
	if s.PrivateKey != nil {
		d.SetPrivateKey(*s.PrivateKey)
	}
	if s.ListenPort != nil {
		if err := d.SetListenPort(*s.ListenPort); err != nil {
			return &Error{Errno: errnoOf(err, syscall.EADDRINUSE), Err: err}
		}
	}
	if s.Fwmark != nil {
		if err := d.SetFwmark(*s.Fwmark); err != nil {
			return &Error{Errno: errnoOf(err, syscall.EINVAL), Err: err}
		}
	}
	if s.ReplacePeers {
		for _, p := range d.Peers() {
			d.RemovePeer(p)
		}
		clear(h.allowed)
		clear(h.owner)
	}
	for i := range s.Peers {
		if err := h.applyPeer(&s.Peers[i]); err != nil {
			return err
		}
	}
	return nil
}

func (h *Handler) applyPeer(ps *PeerSet) error {
	d := h.dev
	if ps.PublicKey == d.PublicKey() && ps.PublicKey != (wireguard.Key{}) {
		return nil
	}
	p := d.PeerByKey(ps.PublicKey)
	switch {
	case ps.Remove:
		if p != nil {
			d.RemovePeer(p)
		}
		h.drop(ps.PublicKey)
		return nil
	case p == nil && ps.UpdateOnly:
		return nil
	case p == nil:
		var err error
		if p, err = d.AddPeer(ps.config()); err != nil {
			return &Error{Errno: syscall.EINVAL, Err: err}
		}
	default:
		if ps.PresharedKey != nil {
			p.SetPresharedKey(*ps.PresharedKey)
		}
		if ps.Endpoint != nil {
			p.SetEndpoint(*ps.Endpoint)
		}
		if ps.PersistentKeepalive != nil {
			p.SetPersistentKeepalive(time.Duration(*ps.PersistentKeepalive) * time.Second)
		}
	}
	if ps.ReplaceAllowedIPs {
		h.drop(ps.PublicKey)
	}
	for _, pfx := range ps.AllowedIPs {
		h.allow(ps.PublicKey, pfx)
	}
	return nil
}

// config is the configuration of a peer ps adds.
func (ps *PeerSet) config() wireguard.PeerConfig {
	c := wireguard.PeerConfig{PublicKey: ps.PublicKey}
	if ps.PresharedKey != nil {
		c.PresharedKey = *ps.PresharedKey
	}
	if ps.Endpoint != nil {
		c.Endpoint = *ps.Endpoint
	}
	if ps.PersistentKeepalive != nil {
		c.PersistentKeepalive = time.Duration(*ps.PersistentKeepalive) * time.Second
	}
	return c
}

// allow gives pfx to peer k, taking it from the peer that had it.
func (h *Handler) allow(k wireguard.Key, pfx netip.Prefix) {
	if o, ok := h.owner[pfx]; ok {
		delete(h.allowed[o], pfx)
		if len(h.allowed[o]) == 0 {
			delete(h.allowed, o)
		}
	}
	h.owner[pfx] = k
	if h.allowed[k] == nil {
		h.allowed[k] = make(map[netip.Prefix]struct{})
	}
	h.allowed[k][pfx] = struct{}{}
}

// drop takes every allowed IP from peer k.
func (h *Handler) drop(k wireguard.Key) {
	for pfx := range h.allowed[k] {
		delete(h.owner, pfx)
	}
	delete(h.allowed, k)
}
