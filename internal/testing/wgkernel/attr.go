package wgkernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// KeyLen is the length of WireGuard's keys (WG_KEY_LEN).
const KeyLen = 32

// Key is a Curve25519 key as the family carries it.
type Key = [KeyLen]byte

// The family's name and version, commands, attributes and flags
// (include/uapi/linux/wireguard.h).
const (
	familyName    = "wireguard"
	familyVersion = 1

	cmdGetDevice = 0
	cmdSetDevice = 1

	deviceIfindex    = 1
	deviceIfname     = 2
	devicePrivateKey = 3
	devicePublicKey  = 4
	deviceFlags      = 5
	deviceListenPort = 6
	devicePeers      = 8

	deviceReplacePeers = 1 << 0

	peerPublicKey     = 1
	peerEndpoint      = 4
	peerLastHandshake = 6
	peerRxBytes       = 7
	peerTxBytes       = 8
	peerAllowedIPs    = 9

	allowedIPFamily = 1
	allowedIPAddr   = 2
	allowedIPCIDR   = 3
)

// Generic netlink's controller: its command and attributes.
const (
	ctrlCmdGetFamily   = 3
	ctrlVersion        = 2
	ctrlAttrFamilyID   = 1
	ctrlAttrFamilyName = 2
)

// Address families, as struct sockaddr and the allowed-IP attributes
// carry them.
const (
	afInet  = 2
	afInet6 = 10
)

// Netlink attributes: a 4-byte header (length, type) and the payload,
// padded to 4 bytes; nested attributes flag their type.
const (
	attrHeaderLen = 4
	attrNested    = 1 << 15
	attrTypeMask  = 1<<14 - 1
)

// Config is a WG_CMD_SET_DEVICE: the device's private key and listen
// port (0: the kernel picks one) and the peers to add or update.
type Config struct {
	Name       string // the device
	PrivateKey Key
	ListenPort int
	// ReplacePeers removes every peer (their sessions with them) before
	// Peers are added.
	ReplacePeers bool
	Peers        []PeerConfig
}

// PeerConfig is one peer of a Config.
type PeerConfig struct {
	PublicKey  Key
	Endpoint   netip.AddrPort // none if invalid
	AllowedIPs []netip.Prefix
}

// Device is what WG_CMD_GET_DEVICE reports of a device.
type Device struct {
	Index      int
	Name       string
	PublicKey  Key
	ListenPort int
	Peers      []Peer
}

// Peer is one peer of a Device.
type Peer struct {
	PublicKey     Key
	Endpoint      netip.AddrPort
	LastHandshake time.Time // zero: none yet
	RxBytes       uint64
	TxBytes       uint64
	AllowedIPs    []netip.Prefix
}

// Peer returns the device's peer of public key pub, or nil.
func (d *Device) Peer(pub Key) *Peer {
	for i := range d.Peers {
		if d.Peers[i].PublicKey == pub {
			return &d.Peers[i]
		}
	}
	return nil
}

// encoder appends netlink attributes to a generic netlink message.
type encoder struct{ b []byte }

// newMessage starts a generic netlink message: the command, the family's
// version and two reserved bytes.
func newMessage(cmd, version uint8) *encoder {
	return &encoder{b: []byte{cmd, version, 0, 0}}
}

func (e *encoder) attr(typ uint16, data []byte) {
	e.b = binary.NativeEndian.AppendUint16(e.b, uint16(attrHeaderLen+len(data)))
	e.b = binary.NativeEndian.AppendUint16(e.b, typ)
	e.b = append(e.b, data...)
	e.pad()
}

func (e *encoder) pad() {
	for len(e.b)%4 != 0 {
		e.b = append(e.b, 0)
	}
}

func (e *encoder) u8(typ uint16, v uint8) { e.attr(typ, []byte{v}) }

func (e *encoder) u16(typ, v uint16) { e.attr(typ, binary.NativeEndian.AppendUint16(nil, v)) }

func (e *encoder) u32(typ uint16, v uint32) { e.attr(typ, binary.NativeEndian.AppendUint32(nil, v)) }

func (e *encoder) str(typ uint16, s string) { e.attr(typ, append([]byte(s), 0)) }

// nest writes a nested attribute of type typ whose payload fill writes.
func (e *encoder) nest(typ uint16, fill func()) {
	start := len(e.b)
	e.attr(typ|attrNested, nil)
	fill()
	binary.NativeEndian.PutUint16(e.b[start:], uint16(len(e.b)-start))
}

// getFamily is the controller's request for the family's ID.
func getFamily() []byte {
	e := newMessage(ctrlCmdGetFamily, ctrlVersion)
	e.str(ctrlAttrFamilyName, familyName)
	return e.b
}

// getDevice is WG_CMD_GET_DEVICE for the device name (sent as a dump).
func getDevice(name string) []byte {
	e := newMessage(cmdGetDevice, familyVersion)
	e.str(deviceIfname, name)
	return e.b
}

// setDevice is WG_CMD_SET_DEVICE for c.
func setDevice(c Config) ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	e := newMessage(cmdSetDevice, familyVersion)
	e.str(deviceIfname, c.Name)
	if c.ReplacePeers {
		e.u32(deviceFlags, deviceReplacePeers)
	}
	e.attr(devicePrivateKey, c.PrivateKey[:])
	e.u16(deviceListenPort, uint16(c.ListenPort))
	e.nest(devicePeers, func() {
		for i, p := range c.Peers {
			e.nest(uint16(i), func() { p.encode(e) })
		}
	})
	return e.b, nil
}

// check reports what of c the family cannot carry.
func (c *Config) check() error {
	if c.ListenPort < 0 || c.ListenPort > 0xffff {
		return fmt.Errorf("wgkernel: listen port %d out of range", c.ListenPort)
	}
	for _, p := range c.Peers {
		for _, pfx := range p.AllowedIPs {
			if !pfx.IsValid() {
				return fmt.Errorf("wgkernel: peer %x...: invalid allowed IP %v", p.PublicKey[:4], pfx)
			}
		}
	}
	return nil
}

func (p *PeerConfig) encode(e *encoder) {
	e.attr(peerPublicKey, p.PublicKey[:])
	if p.Endpoint.IsValid() {
		e.attr(peerEndpoint, sockaddr(p.Endpoint))
	}
	p.encodeAllowedIPs(e)
}

func (p *PeerConfig) encodeAllowedIPs(e *encoder) {
	e.nest(peerAllowedIPs, func() {
		for i, pfx := range p.AllowedIPs {
			e.nest(uint16(i), func() {
				a := pfx.Addr().Unmap()
				family := uint16(afInet)
				if a.Is6() {
					family = afInet6
				}
				e.u16(allowedIPFamily, family)
				e.attr(allowedIPAddr, a.AsSlice())
				e.u8(allowedIPCIDR, uint8(pfx.Bits()))
			})
		}
	})
}

// sockaddr is ap as struct sockaddr_in or struct sockaddr_in6: the family
// in the host's order, the port in the network's.
func sockaddr(ap netip.AddrPort) []byte {
	a := ap.Addr().Unmap()
	if a.Is4() {
		b := binary.NativeEndian.AppendUint16(nil, afInet)
		b = binary.BigEndian.AppendUint16(b, ap.Port())
		b = append(b, a.AsSlice()...)
		return append(b, make([]byte, 8)...) // sin_zero
	}
	b := binary.NativeEndian.AppendUint16(nil, afInet6)
	b = binary.BigEndian.AppendUint16(b, ap.Port())
	b = append(b, 0, 0, 0, 0) // flow info
	b = append(b, a.AsSlice()...)
	return binary.NativeEndian.AppendUint32(b, 0) // scope ID
}

// errMalformed is the parser's error for anything it cannot read.
var errMalformed = errors.New("wgkernel: malformed netlink attributes")

// walk calls fn with the type (without flags) and payload of each
// attribute in b.
func walk(b []byte, fn func(typ uint16, data []byte) error) error {
	for len(b) > 0 {
		if len(b) < attrHeaderLen {
			return errMalformed
		}
		n := int(binary.NativeEndian.Uint16(b))
		if n < attrHeaderLen || n > len(b) {
			return errMalformed
		}
		if err := fn(binary.NativeEndian.Uint16(b[2:])&attrTypeMask, b[attrHeaderLen:n]); err != nil {
			return err
		}
		b = b[min((n+3)&^3, len(b)):]
	}
	return nil
}

func u16(b []byte) (uint16, error) {
	if len(b) < 2 {
		return 0, errMalformed
	}
	return binary.NativeEndian.Uint16(b), nil
}

func u64(b []byte) (uint64, error) {
	if len(b) < 8 {
		return 0, errMalformed
	}
	return binary.NativeEndian.Uint64(b), nil
}

func key(b []byte) (Key, error) {
	var k Key
	if len(b) != KeyLen {
		return k, errMalformed
	}
	copy(k[:], b)
	return k, nil
}

// genlAttrs returns the attributes of a generic netlink message.
func genlAttrs(msg []byte) ([]byte, error) {
	if len(msg) < 4 {
		return nil, errMalformed
	}
	return msg[4:], nil
}

// parseFamilyID reads the family's ID from the controller's reply.
func parseFamilyID(msg []byte) (uint16, error) {
	attrs, err := genlAttrs(msg)
	if err != nil {
		return 0, err
	}
	var id uint16
	err = walk(attrs, func(typ uint16, data []byte) (err error) {
		if typ == ctrlAttrFamilyID {
			id, err = u16(data)
		}
		return err
	})
	if err == nil && id == 0 {
		err = fmt.Errorf("wgkernel: no family ID in the controller's reply")
	}
	return id, err
}

// parseDevice reads the messages of a WG_CMD_GET_DEVICE dump into one
// Device: a peer continued from the message before (the same public key)
// adds its allowed IPs to it.
func parseDevice(msgs [][]byte) (*Device, error) {
	d := &Device{}
	for _, msg := range msgs {
		attrs, err := genlAttrs(msg)
		if err != nil {
			return nil, err
		}
		if err := walk(attrs, d.attr); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *Device) attr(typ uint16, data []byte) error {
	var err error
	switch typ {
	case deviceIfindex:
		if len(data) < 4 {
			return errMalformed
		}
		d.Index = int(binary.NativeEndian.Uint32(data))
	case deviceIfname:
		d.Name = string(data[:max(0, len(data)-1)])
	case devicePublicKey:
		d.PublicKey, err = key(data)
	case deviceListenPort:
		var p uint16
		p, err = u16(data)
		d.ListenPort = int(p)
	case devicePeers:
		err = walk(data, func(_ uint16, peer []byte) error {
			var p Peer
			if err := walk(peer, p.attr); err != nil {
				return err
			}
			if n := len(d.Peers); n > 0 && d.Peers[n-1].PublicKey == p.PublicKey {
				d.Peers[n-1].AllowedIPs = append(d.Peers[n-1].AllowedIPs, p.AllowedIPs...)
				return nil
			}
			d.Peers = append(d.Peers, p)
			return nil
		})
	}
	return err
}

func (p *Peer) attr(typ uint16, data []byte) error {
	var err error
	switch typ {
	case peerPublicKey:
		p.PublicKey, err = key(data)
	case peerEndpoint:
		p.Endpoint, err = parseSockaddr(data)
	case peerLastHandshake: // struct __kernel_timespec
		if len(data) != 16 {
			return errMalformed
		}
		sec, nsec := int64(binary.NativeEndian.Uint64(data)), int64(binary.NativeEndian.Uint64(data[8:]))
		if sec != 0 || nsec != 0 {
			p.LastHandshake = time.Unix(sec, nsec)
		}
	case peerRxBytes:
		p.RxBytes, err = u64(data)
	case peerTxBytes:
		p.TxBytes, err = u64(data)
	case peerAllowedIPs:
		err = walk(data, func(_ uint16, ip []byte) error {
			pfx, err := parseAllowedIP(ip)
			p.AllowedIPs = append(p.AllowedIPs, pfx)
			return err
		})
	}
	return err
}

func parseSockaddr(b []byte) (netip.AddrPort, error) {
	family, err := u16(b)
	if err != nil {
		return netip.AddrPort{}, err
	}
	switch {
	case family == afInet && len(b) >= 8:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:])), nil
	case family == afInet6 && len(b) >= 24:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:])), nil
	}
	return netip.AddrPort{}, errMalformed
}

func parseAllowedIP(b []byte) (netip.Prefix, error) {
	var addr []byte
	bits := -1
	err := walk(b, func(typ uint16, data []byte) error {
		switch typ {
		case allowedIPAddr:
			addr = data
		case allowedIPCIDR:
			if len(data) < 1 {
				return errMalformed
			}
			bits = int(data[0])
		}
		return nil
	})
	if err != nil {
		return netip.Prefix{}, err
	}
	a, ok := netip.AddrFromSlice(addr)
	if !ok || bits < 0 || bits > a.BitLen() {
		return netip.Prefix{}, errMalformed
	}
	return netip.PrefixFrom(a, bits), nil
}
