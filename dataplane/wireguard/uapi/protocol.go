package uapi

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/gsoplane/gsoplane/dataplane/wireguard"
)

// Limits bound what one client may send, and for how long. Zero fields
// take the defaults.
type Limits struct {
	Line       int           // the longest line, its newline included (default 512)
	Peers      int           // public_key lines in one set (default 65536)
	AllowedIPs int           // allowed_ip lines in one set (default 262144)
	Timeout    time.Duration // to send the operations, and to read each answer (Server; default 10 s)
	Conns      int           // connections served at once (Server; default 8)
}

func (l Limits) withDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = 10 * time.Second
	}
	if l.Conns <= 0 {
		l.Conns = 8
	}
	if l.Line <= 0 {
		l.Line = 512
	}
	if l.Peers <= 0 {
		l.Peers = 1 << 16
	}
	if l.AllowedIPs <= 0 {
		l.AllowedIPs = 1 << 18
	}
	return l
}

// A Set is one set operation, parsed: what it changes, in order.
type Set struct {
	PrivateKey   *wireguard.Key // zero: remove it
	ListenPort   *uint16        // 0: the device picks
	Fwmark       *uint32        // 0: none
	ReplacePeers bool           // remove every peer first
	Peers        []PeerSet
}

// A PeerSet is what a set operation changes of one peer.
type PeerSet struct {
	PublicKey           wireguard.Key
	Remove              bool // remove the peer (the rest is ignored)
	UpdateOnly          bool // change the peer only if it exists
	PresharedKey        *wireguard.Key
	Endpoint            *netip.AddrPort
	PersistentKeepalive *uint16 // seconds; 0: none
	ReplaceAllowedIPs   bool    // drop the peer's allowed IPs first
	AllowedIPs          []netip.Prefix
}

// An Error is a failed operation: the errno it answers with (errno=-N,
// as wg(8) reads it) and why.
type Error struct {
	Errno syscall.Errno
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("uapi: %v (%v)", e.Err, e.Errno) }

func (e *Error) Unwrap() error { return e.Err }

func errorf(errno syscall.Errno, format string, a ...any) *Error {
	return &Error{Errno: errno, Err: fmt.Errorf(format, a...)}
}

// errnoOf returns the errno err carries, or def.
func errnoOf(err error, def syscall.Errno) syscall.Errno {
	var e *Error
	var n syscall.Errno
	switch {
	case errors.As(err, &e):
		return e.Errno
	case errors.As(err, &n):
		return n
	}
	return def
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline, or io.EOF if
// the client closed between lines. A line longer than max is an error;
// its rest is skipped (so that the operation's end can still be found).
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	switch {
	case err == nil && len(line) <= max:
		return line[:len(line)-1], nil
	case err == io.EOF && len(line) == 0:
		return nil, io.EOF
	}
	for errors.Is(err, bufio.ErrBufferFull) {
		_, err = r.ReadSlice('\n')
	}
	switch {
	case err == io.EOF:
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	}
	return nil, errLineTooLong
}

// ParseSet reads a set operation's lines after "set=1", up to the empty
// line that ends it. An error that is the client's (an *Error) leaves r
// at the operation's end, for the answer; an I/O error does not. Nothing
// is applied: a Set is all or nothing until the Device refuses part of
// it.
func ParseSet(r *bufio.Reader, lim Limits) (*Set, error) {
	lim = lim.withDefaults()
	s := &Set{}
	var failed *Error
	allowed := 0
	for {
		line, err := readLine(r, lim.Line)
		switch {
		case errors.Is(err, errLineTooLong):
			if failed == nil {
				failed = errorf(syscall.E2BIG, "a line longer than %d bytes", lim.Line)
			}
			continue
		case err != nil:
			return nil, err
		case len(line) == 0:
			if failed != nil {
				return nil, failed
			}
			return s, nil
		case failed != nil:
			continue // skipped to the end
		}
		key, value, ok := bytes.Cut(line, []byte{'='})
		if !ok {
			failed = errorf(syscall.EPROTO, "a line without '=': %.40q", line)
			continue
		}
		if string(key) == "public_key" {
			if len(s.Peers) == lim.Peers {
				failed = errorf(syscall.E2BIG, "more than %d peers", lim.Peers)
				continue
			}
			s.Peers = append(s.Peers, PeerSet{})
		}
		if string(key) == "allowed_ip" {
			if allowed++; allowed > lim.AllowedIPs {
				failed = errorf(syscall.E2BIG, "more than %d allowed IPs", lim.AllowedIPs)
				continue
			}
		}
		if len(s.Peers) == 0 {
			err = s.setDevice(string(key), string(value))
		} else {
			err = s.Peers[len(s.Peers)-1].set(string(key), string(value))
		}
		if err != nil {
			failed = errorf(syscall.EINVAL, "%s: %w", key, err)
		}
	}
}

var (
	errNotTrue   = errors.New("the only value is true")
	errUnknown   = errors.New("unknown key")
	errVersion   = errors.New("the only protocol version is 1")
	errNoAddress = errors.New("not IP:port or [IP]:port")
	errNoPrefix  = errors.New("not IP/cidr")
)

func (s *Set) setDevice(key, value string) error {
	switch key {
	case "private_key":
		k, err := parseKey(value)
		s.PrivateKey = &k
		return err
	case "listen_port":
		n, err := strconv.ParseUint(value, 10, 16)
		port := uint16(n)
		s.ListenPort = &port
		return err
	case "fwmark":
		n, err := strconv.ParseUint(value, 10, 32)
		mark := uint32(n)
		s.Fwmark = &mark
		return err
	case "replace_peers":
		return parseTrue(value, &s.ReplacePeers)
	}
	return errUnknown
}

func (p *PeerSet) set(key, value string) error {
	switch key {
	case "public_key":
		k, err := parseKey(value)
		p.PublicKey = k
		return err
	case "remove":
		return parseTrue(value, &p.Remove)
	case "update_only":
		return parseTrue(value, &p.UpdateOnly)
	case "preshared_key":
		k, err := parseKey(value)
		p.PresharedKey = &k
		return err
	case "endpoint":
		ep, err := netip.ParseAddrPort(value)
		if err != nil {
			return errNoAddress
		}
		p.Endpoint = &ep
	case "persistent_keepalive_interval":
		n, err := strconv.ParseUint(value, 10, 16)
		secs := uint16(n)
		p.PersistentKeepalive = &secs
		return err
	case "replace_allowed_ips":
		p.AllowedIPs = p.AllowedIPs[:0] // those before are replaced too
		return parseTrue(value, &p.ReplaceAllowedIPs)
	case "allowed_ip":
		pfx, err := netip.ParsePrefix(value)
		if err != nil || pfx.Addr().Zone() != "" {
			return errNoPrefix
		}
		p.AllowedIPs = append(p.AllowedIPs, pfx.Masked())
	case "protocol_version":
		if value != "1" {
			return errVersion
		}
	default:
		return errUnknown
	}
	return nil
}

func parseTrue(value string, b *bool) error {
	if value != "true" {
		return errNotTrue
	}
	*b = true
	return nil
}

// parseKey parses a key in hex, as the protocol writes keys.
func parseKey(s string) (wireguard.Key, error) {
	var k wireguard.Key
	if len(s) != 2*len(k) {
		return k, errors.New("a key is 64 hex digits")
	}
	_, err := hex.Decode(k[:], []byte(s))
	return k, err
}

// A Peer is a peer as a get operation shows it.
type Peer struct {
	wireguard.PeerConfig
	AllowedIPs    []netip.Prefix
	LastHandshake int64 // Unix nanoseconds; 0: never
	RxBytes       uint64
	TxBytes       uint64
}

// A State is a device as a get operation shows it.
type State struct {
	PrivateKey wireguard.Key
	ListenPort uint16
	Fwmark     uint32
	Peers      []Peer
}

// AppendGet appends st as the answer to a get operation, errno=0 and
// the empty line included. The device's private key, listen port and
// fwmark, and a peer's pre-shared key and endpoint, are left out when
// zero (none).
func AppendGet(dst []byte, st *State) []byte {
	line := func(key string, value []byte) { dst = append(append(append(append(dst, key...), '='), value...), '\n') }
	num := func(key string, n uint64) { line(key, strconv.AppendUint(nil, n, 10)) }
	key := func(name string, k *wireguard.Key) { line(name, hex.AppendEncode(nil, k[:])) }
	if st.PrivateKey != (wireguard.Key{}) {
		key("private_key", &st.PrivateKey)
	}
	if st.ListenPort != 0 {
		num("listen_port", uint64(st.ListenPort))
	}
	if st.Fwmark != 0 {
		num("fwmark", uint64(st.Fwmark))
	}
	for i := range st.Peers {
		p := &st.Peers[i]
		key("public_key", &p.PublicKey)
		if p.PresharedKey != (wireguard.Key{}) {
			key("preshared_key", &p.PresharedKey)
		}
		num("protocol_version", 1)
		if p.Endpoint.IsValid() {
			line("endpoint", p.Endpoint.AppendTo(nil))
		}
		num("last_handshake_time_sec", uint64(p.LastHandshake/1e9))
		num("last_handshake_time_nsec", uint64(p.LastHandshake%1e9))
		num("tx_bytes", p.TxBytes)
		num("rx_bytes", p.RxBytes)
		num("persistent_keepalive_interval", uint64(p.PersistentKeepalive.Seconds()))
		for _, a := range p.AllowedIPs {
			line("allowed_ip", a.AppendTo(nil))
		}
	}
	return append(dst, "errno=0\n\n"...)
}

// appendErrno appends the answer to an operation that failed with err
// (errno=-N, as wg(8) reads it) or succeeded (nil).
func appendErrno(dst []byte, err error) []byte {
	n := 0
	if err != nil {
		n = -int(errnoOf(err, syscall.EINVAL))
	}
	return fmt.Appendf(dst, "errno=%d\n\n", n)
}
