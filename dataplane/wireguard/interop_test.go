package wireguard

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun/tuntest"
)

// wgGo is a wireguard-go device on a channel TUN and its default UDP
// bind, with this package's device (on a plain UDP socket on 127.0.0.1)
// as its one peer.
type wgGo struct {
	t      *testing.T
	dev    *device.Device
	tun    *tuntest.ChannelTUN
	pub    Key
	addr   netip.AddrPort // its UDP address
	inside netip.Addr     // its TUN address
}

// side is this package's device, speaking through a plain UDP socket.
type side struct {
	t      *testing.T
	d      *Device
	p      *Peer // wireguard-go
	c      *net.UDPConn
	in     chan []byte
	index  uint32 // the receiver index of the last data message pumped
	inside netip.Addr
}

const interopWait = 20 * time.Second

func startWgGo(t *testing.T, peer Key, psk Key, endpoint netip.AddrPort) *wgGo {
	priv, _ := NewPrivateKey()
	w := &wgGo{t: t, tun: tuntest.NewChannelTUN(), pub: priv.Public(), inside: netip.MustParseAddr("10.0.0.1")}
	w.dev = device.NewDevice(w.tun.TUN(), conn.NewDefaultBind(), device.NewLogger(device.LogLevelError, "wireguard-go: "))
	t.Cleanup(w.dev.Close)
	cfg := fmt.Sprintf("private_key=%s\nlisten_port=0\npublic_key=%s\npreshared_key=%s\nendpoint=%s\nallowed_ip=10.0.0.2/32\npersistent_keepalive_interval=1\n",
		hex.EncodeToString(priv[:]), hex.EncodeToString(peer[:]), hex.EncodeToString(psk[:]), endpoint)
	if err := w.dev.IpcSet(cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.dev.Up(); err != nil {
		t.Fatal(err)
	}
	get, err := w.dev.IpcGet()
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(regexp.MustCompile(`listen_port=(\d+)`).FindStringSubmatch(get)[1])
	w.addr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	return w
}

func newSide(t *testing.T, timers *Timers) *side {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	priv, _ := NewPrivateKey()
	d, err := NewDevice(Config{PrivateKey: priv, Timers: timers})
	if err != nil {
		t.Fatal(err)
	}
	s := &side{t: t, d: d, c: c, in: make(chan []byte, 1024), inside: netip.MustParseAddr("10.0.0.2")}
	go func() {
		for {
			b := make([]byte, 2048)
			n, err := c.Read(b)
			if err != nil {
				close(s.in)
				return
			}
			s.in <- b[:n]
		}
	}()
	return s
}

func (s *side) local() netip.AddrPort { return s.c.LocalAddr().(*net.UDPAddr).AddrPort() }

func (s *side) send(b []byte) {
	if _, err := s.c.WriteToUDPAddrPort(b, s.p.Endpoint()); err != nil {
		s.t.Fatal(err)
	}
}

// seal seals inner (nil: a keepalive) to wireguard-go and sends it.
func (s *side) seal(inner []byte) {
	s.t.Helper()
	pkts := []Packet{{Buf: datagram(inner), Peer: s.p}}
	s.d.Seal(pkts)
	if pkts[0].Reason != OK {
		s.t.Fatalf("seal: %v", pkts[0].Reason)
	}
	s.send(pkts[0].Buf)
}

// pump takes datagrams from wireguard-go, answering handshake messages,
// until done says so of one (given its type, the error Handle or Open
// gave, and an opened data message's inner packet).
func (s *side) pump(done func(typ uint32, err error, inner []byte) bool) {
	s.t.Helper()
	if !s.pumpFor(interopWait, done) {
		s.t.Fatal("nothing expected from wireguard-go")
	}
}

// pumpFor is pump for at most wait; it reports whether done said so.
func (s *side) pumpFor(wait time.Duration, done func(typ uint32, err error, inner []byte) bool) bool {
	deadline := time.After(wait)
	for {
		var msg []byte
		select {
		case msg = <-s.in:
		case <-deadline:
			return false
		}
		src := s.p.Endpoint()
		var err error
		var inner []byte
		switch typ := Type(msg); typ {
		case TypeData:
			s.index = index(msg, offReceiver)
			pkts := []Packet{{Buf: msg, Addr: src}}
			s.d.Open(pkts)
			if r := pkts[0].Reason; r != OK {
				err = r
			} else {
				inner = pkts[0].Buf[HeaderLen:]
			}
		default:
			var reply []byte
			reply, _, err = s.d.Handle(nil, msg, src, false)
			if len(reply) > 0 {
				s.send(reply)
			}
		}
		if done(Type(msg), err, inner) {
			return true
		}
	}
}

// ping returns an ICMP echo request from src to dst.
func ping(dst, src netip.Addr) []byte { return tuntest.Ping(dst, src) }

// toTUN waits for wireguard-go to write want into its TUN.
func (w *wgGo) toTUN(want []byte) {
	w.t.Helper()
	deadline := time.After(interopWait)
	for {
		select {
		case got := <-w.tun.Inbound:
			if bytes.Equal(got, want) {
				return
			}
			w.t.Logf("wireguard-go's TUN got another packet of %d bytes", len(got))
		case <-deadline:
			w.t.Fatal("the packet did not come out of wireguard-go's TUN")
		}
	}
}

// fromTUN hands wireguard-go a packet to send.
func (w *wgGo) fromTUN(p []byte) {
	w.t.Helper()
	select {
	case w.tun.Outbound <- p:
	case <-time.After(interopWait):
		w.t.Fatal("wireguard-go does not read its TUN")
	}
}

// TestInteropWireguardGo runs this package against wireguard-go over
// UDP on 127.0.0.1: a handshake initiated by wireguard-go, then by this
// side, data both ways after each, keepalives both ways, a rekey by this
// side's shortened RekeyAfterTime, and a cookie reply from wireguard-go
// under load, whose MAC2 it then accepts.
func TestInteropWireguardGo(t *testing.T) {
	if testing.Short() {
		t.Skip("talks to wireguard-go over loopback UDP")
	}
	timers := DefaultTimers
	timers.RekeyAfterTime = 2 * time.Second
	timers.RekeyTimeout = time.Second // the rate of initiations
	s := newSide(t, &timers)
	var psk Key
	psk[5] = 42
	w := startWgGo(t, s.d.PublicKey(), psk, s.local())
	var err error
	if s.p, err = s.d.AddPeer(PeerConfig{PublicKey: w.pub, PresharedKey: psk, Endpoint: w.addr}); err != nil {
		t.Fatal(err)
	}

	// wireguard-go initiates, to send a packet; it sends it once the
	// handshake completes, and its keypair becomes this side's current.
	out := ping(s.inside, w.inside)
	w.fromTUN(out)
	var sawInit bool
	s.pump(func(typ uint32, err error, inner []byte) bool {
		if typ == TypeInitiation && err == nil {
			sawInit = true
		}
		return typ == TypeData && bytes.Equal(inner, out)
	})
	if !sawInit || s.p.current.Load() == nil || s.p.current.Load().initiator {
		t.Fatal("wireguard-go's handshake did not make this side's current keypair")
	}
	in := ping(w.inside, s.inside)
	s.seal(in)
	w.toTUN(in)
	t.Log("handshake by wireguard-go, data both ways: ok")

	// wireguard-go's persistent keepalive (1 s) opens as a keepalive.
	s.pump(func(typ uint32, err error, _ []byte) bool { return err == Keepalive })

	// This side initiates; its keepalive confirms the keypair to
	// wireguard-go, which then sends with it.
	s.initiate()
	rekeyed := s.p.current.Load()
	out = ping(s.inside, w.inside)
	w.fromTUN(out)
	s.pump(func(typ uint32, err error, inner []byte) bool { return bytes.Equal(inner, out) })
	in = ping(w.inside, s.inside)
	s.seal(in)
	w.toTUN(in)
	t.Log("handshake by this side, keepalive, data both ways: ok")

	// RekeyAfterTime (2 s here, and RekeyTimeout 1 s) passes: the next packet sealed asks for
	// a handshake, which Tick says to send.
	for time.Since(s.p.LastHandshake()) < timers.RekeyAfterTime {
		time.Sleep(100 * time.Millisecond)
	}
	in = ping(w.inside, s.inside)
	s.seal(in)
	w.toTUN(in) // (wireguard-go's receiver waits for its TUN write to be taken)
	if act, _ := s.p.Tick(); act&SendInitiation == 0 {
		t.Fatalf("Tick after RekeyAfterTime: %v", act)
	}
	s.initiate()
	if s.p.current.Load() == rekeyed {
		t.Fatal("no new keypair")
	}
	in = ping(w.inside, s.inside)
	s.seal(in)
	w.toTUN(in)
	out = ping(s.inside, w.inside)
	w.fromTUN(out)
	s.pump(func(typ uint32, err error, inner []byte) bool { return bytes.Equal(inner, out) })
	t.Log("rekey after RekeyAfterTime: ok")

	s.underLoad(w)
}

// initiate runs a handshake from this side and sends the keepalive Tick
// asks for.
func (s *side) initiate() {
	s.t.Helper()
	init, err := s.d.AppendInitiation(nil, s.p)
	if err != nil {
		s.t.Fatal(err)
	}
	s.send(init)
	s.pump(func(typ uint32, err error, _ []byte) bool { return typ == TypeResponse && err == nil })
	if act, _ := s.p.Tick(); act&SendKeepalive == 0 {
		s.t.Fatalf("Tick after the handshake: %v", act)
	}
	s.seal(nil)
	// wireguard-go sends with the new keypair once the keepalive
	// confirmed it: its next persistent keepalive (1 s) does.
	s.pump(func(typ uint32, err error, _ []byte) bool {
		return err == Keepalive && s.index == s.p.current.Load().localIndex
	})
}

// underLoad floods wireguard-go with initiations that pass MAC1 and fail
// later, so that its handshake queue fills and it asks for cookies: this
// side's initiation (in the middle of the flood, where the queue has
// room for it but a backlog behind it) gets a cookie reply, and the next
// one, with MAC2, gets a response. The load is wireguard-go's judgement:
// where it keeps up with the flood every time, the test skips.
func (s *side) underLoad(w *wgGo) {
	t := s.t
	flood, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(w.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	mac1Key := hashOf(labelMAC1, w.pub[:])
	junk := make([]byte, InitiationSize)
	burst := func() {
		for i := range 1500 {
			putType(junk, TypeInitiation)
			putIndex(junk, offSender, uint32(i))
			o1, _ := macs(junk)
			m := macOf(mac1Key[:], junk[:o1])
			copy(junk[o1:], m[:])
			flood.Write(junk)
		}
	}
	for try := 0; try < 10; try++ {
		burst()
		init, err := s.d.AppendInitiation(nil, s.p)
		if err != nil {
			t.Fatal(err)
		}
		s.send(init)
		var got uint32
		s.pumpFor(3*time.Second, func(typ uint32, err error, _ []byte) bool {
			if (typ == TypeCookieReply || typ == TypeResponse) && err == nil {
				got = typ
				return true
			}
			return false
		})
		if got != TypeCookieReply {
			time.Sleep(1100 * time.Millisecond) // wireguard-go's load state lapses
			continue
		}
		if s.p.jar.got == 0 {
			t.Fatal("cookie reply taken but no cookie kept")
		}
		// wireguard-go stays under load for a second after a backlog: an
		// initiation with MAC2 passes its cookie check (one the flood's
		// backlog dropped is sent again).
		for again := 0; again < 10; again++ {
			loaded := w.dev.IsUnderLoad()
			init, _ = s.d.AppendInitiation(nil, s.p)
			if o2 := InitiationSize - macLen; bytes.Equal(init[o2:], make([]byte, macLen)) {
				t.Fatal("no MAC2 with a fresh cookie")
			}
			s.send(init)
			if s.pumpFor(2*time.Second, func(typ uint32, err error, _ []byte) bool { return typ == TypeResponse && err == nil }) {
				t.Logf("cookie reply under load, then a response to MAC2 (wireguard-go under load: %v): ok", loaded)
				return
			}
		}
		t.Fatal("no response to an initiation with MAC2")
	}
	t.Skip("wireguard-go was never under load")
}
