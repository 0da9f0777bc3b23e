package main

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// floorPipe is a pipe: what the floor's pumps read from or write to, in
// place of a TUN device or a packet socket.
func floorPipe(t *testing.T) (r, w int) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, 1<<20); err != nil {
		t.Fatal(err)
	}
	return p[0], p[1]
}

// pumpRounds writes in into the pump's input, runs the pump once and
// reads what it sent, 20 times over, and returns the last of it and the
// allocations per round.
func pumpRounds(t *testing.T, p pump, inW, outR int, in, buf, hdr []byte) (got []byte, allocs float64) {
	t.Helper()
	out := make([]byte, floorBufSize)
	allocs = testing.AllocsPerRun(20, func() {
		unix.Write(inW, in)
		if ok, err := p(buf, hdr); !ok || err != nil {
			t.Fatalf("pump: %v %v", ok, err)
		}
		n, _ := unix.Read(outR, out)
		got = out[:n]
	})
	return got, allocs
}

// TestFloorPumps: each pump moves a super-packet with its virtio-net
// header's offsets moved by the Ethernet header (TUN ⇄ packet socket),
// the Ethernet addresses rewritten (packet ⇄ packet), frames to other
// destinations left to the host, and no allocation per packet (the
// floor's CPU time is compared with the gateway's).
func TestFloorPumps(t *testing.T) {
	dst := netip.MustParsePrefix("198.18.0.0/24")
	ipPkt := make([]byte, 3000)
	ipPkt[0] = 0x45
	copy(ipPkt[16:20], []byte{198, 18, 0, 1})
	for i := 20; i < len(ipPkt); i++ {
		ipPkt[i] = byte(i)
	}
	var vnet [floorVnet]byte // NEEDS_CSUM, TCPV4, hdr_len 52, gso_size 1448, csum_start 20, csum_offset 16
	vnet[0], vnet[1] = unix.VIRTIO_NET_HDR_F_NEEDS_CSUM, unix.VIRTIO_NET_HDR_GSO_TCPV4
	le := binary.LittleEndian
	le.PutUint16(vnet[2:], 52)
	le.PutUint16(vnet[4:], 1448)
	le.PutUint16(vnet[6:], 20)
	le.PutUint16(vnet[8:], 16)
	eth := [floorEth]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x08, 0x00}
	buf, hdr := make([]byte, floorBufSize), make([]byte, floorTUNHdr)

	t.Run("tun to packet", func(t *testing.T) {
		inR, inW := floorPipe(t)
		outR, outW := floorPipe(t)
		p := tunToPacket(inR, outW, eth)
		tunHdr := append(vnet[:], make([]byte, floorTUNHdr-floorVnet)...)
		in := append(tunHdr, ipPkt...)
		got, allocs := pumpRounds(t, p, inW, outR, in, buf, hdr)
		if le.Uint16(got[6:]) != 20+floorEth || le.Uint16(got[2:]) != 52+floorEth || le.Uint16(got[4:]) != 1448 ||
			!bytes.Equal(got[floorVnet:floorPkt], eth[:]) || !bytes.Equal(got[floorPkt:], ipPkt) {
			t.Errorf("frame sent: header % x, Ethernet % x, packet intact %v", got[:floorVnet], got[floorVnet:floorPkt], bytes.Equal(got[floorPkt:], ipPkt))
		}
		if allocs != 0 {
			t.Errorf("%v allocations per packet", allocs)
		}
	})
	frame := append(append(append([]byte{}, vnet[:]...), eth[:]...), ipPkt...)
	le.PutUint16(frame[6:], 20+floorEth)
	le.PutUint16(frame[2:], 52+floorEth)
	t.Run("packet to tun", func(t *testing.T) {
		inR, inW := floorPipe(t)
		outR, outW := floorPipe(t)
		p := packetToTUN(inR, outW, dst)
		for i := range hdr {
			hdr[i] = 0xee // dirty: the TUN header's tail must be zero
		}
		got, allocs := pumpRounds(t, p, inW, outR, frame, buf, hdr)
		if le.Uint16(got[6:]) != 20 || le.Uint16(got[2:]) != 52 || !bytes.Equal(got[floorVnet:floorTUNHdr], make([]byte, floorTUNHdr-floorVnet)) ||
			!bytes.Equal(got[floorTUNHdr:], ipPkt) {
			t.Errorf("packet written: header % x, packet intact %v", got[:floorTUNHdr], bytes.Equal(got[floorTUNHdr:], ipPkt))
		}
		if allocs != 0 {
			t.Errorf("%v allocations per packet", allocs)
		}
		other := append([]byte{}, frame...)
		other[floorPkt+16] = 10 // another destination: the host's
		unix.Write(inW, other)
		if ok, err := p(buf, hdr); ok || err != nil {
			t.Errorf("a frame to another destination: forwarded %v, %v", ok, err)
		}
	})
	t.Run("packet to packet", func(t *testing.T) {
		inR, inW := floorPipe(t)
		outR, outW := floorPipe(t)
		to := [floorEth]byte{6, 5, 4, 3, 2, 1, 12, 11, 10, 9, 8, 7, 0x08, 0x00}
		p := packetToPacket(inR, outW, dst, to)
		got, allocs := pumpRounds(t, p, inW, outR, frame, buf, hdr)
		if !bytes.Equal(got[:floorVnet], frame[:floorVnet]) || !bytes.Equal(got[floorVnet:floorPkt], to[:]) || !bytes.Equal(got[floorPkt:], ipPkt) {
			t.Errorf("frame sent: header % x, Ethernet % x", got[:floorVnet], got[floorVnet:floorPkt])
		}
		if allocs != 0 {
			t.Errorf("%v allocations per packet", allocs)
		}
	})
}

// TestTunnelFloorPumps sends a TCP super-packet through the tunnel
// floor's two pumps over UDP sockets on a namespace's loopback, with
// pipes for the TUN devices: the sender's UDP_SEGMENT message carries its
// segments, the receiver's UDP_GRO batch goes back into one super-packet
// (its virtio-net header, IPv4 length and checksum, the first sequence
// number, the last segment's PSH, the partial TCP checksum) with the
// payload intact, and neither allocates per packet.
func TestTunnelFloorPumps(t *testing.T) {
	requireRoot(t)
	ns := netlab.NewT(t, "floor")
	netlab.Must(t, ns.LinkUp("lo"))
	var a, b int
	ns.Do(t, func() {
		var err error
		a, err = tunnelFloorSocket(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
		netlab.Must(t, err)
		b, err = tunnelFloorSocket(netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"))
		netlab.Must(t, err)
	})
	t.Cleanup(func() { unix.Close(a); unix.Close(b) })
	inR, inW := floorPipe(t)
	outR, outW := floorPipe(t)
	tf := &tunnelFloor{}
	send, recv := tf.tunToUDP(inR, a), tf.udpToTUN(b, outW)

	const hl, mss, seq = 52, 1404, 1000
	payload := make([]byte, 20000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	pkt := make([]byte, hl, hl+len(payload))
	pkt[0], pkt[9], pkt[8] = 0x45, unix.IPPROTO_TCP, 64
	copy(pkt[12:], []byte{198, 19, 0, 1, 198, 19, 0, 2})
	be, le := binary.BigEndian, binary.LittleEndian
	be.PutUint16(pkt[20:], 40000)
	be.PutUint16(pkt[22:], 5201)
	be.PutUint32(pkt[24:], seq)
	pkt[32], pkt[33] = 8<<4, 0x18 // 32-byte TCP header, ACK|PSH
	pkt = append(pkt, payload...)
	be.PutUint16(pkt[2:], uint16(len(pkt)))
	vnet := make([]byte, tunnelFloorHdr)
	vnet[0], vnet[1] = unix.VIRTIO_NET_HDR_F_NEEDS_CSUM, unix.VIRTIO_NET_HDR_GSO_TCPV4
	le.PutUint16(vnet[2:], hl)
	le.PutUint16(vnet[4:], mss)
	le.PutUint16(vnet[6:], 20)
	le.PutUint16(vnet[8:], 16)
	in := append(vnet, pkt...)

	buf, hdr := make([]byte, floorBufSize), make([]byte, floorTUNHdr)
	rbuf := make([]byte, floorBufSize)
	got := make([]byte, floorBufSize)
	allocs := testing.AllocsPerRun(10, func() {
		unix.Write(inW, in)
		if _, err := send(buf, hdr); err != nil {
			t.Fatalf("send: %v", err)
		}
		if _, err := recv(rbuf, nil); err != nil {
			t.Fatalf("receive: %v", err)
		}
		n, _ := unix.Read(outR, got)
		got = got[:n]
	})
	if allocs != 0 {
		t.Errorf("%v allocations per super-packet", allocs)
	}
	out := got[tunnelFloorHdr:]
	h := got[:tunnelFloorHdr]
	if h[0] != unix.VIRTIO_NET_HDR_F_NEEDS_CSUM || h[1] != unix.VIRTIO_NET_HDR_GSO_TCPV4 || le.Uint16(h[2:]) != hl ||
		le.Uint16(h[4:]) != mss || le.Uint16(h[6:]) != 20 || le.Uint16(h[8:]) != 16 {
		t.Errorf("virtio-net header % x", h)
	}
	if len(out) != len(pkt) || be.Uint16(out[2:]) != uint16(len(pkt)) || be.Uint32(out[24:]) != seq || out[33] != 0x18 ||
		!bytes.Equal(out[hl:], payload) || !bytes.Equal(out[12:24], pkt[12:24]) {
		t.Errorf("packet written: %d bytes (want %d), header % x, payload intact %v", len(out), len(pkt), out[:min(len(out), hl)], bytes.Equal(out[hl:], payload))
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(be.Uint16(out[i:]))
	}
	if fold16(sum) != 0xffff {
		t.Errorf("IPv4 checksum %#04x does not check", be.Uint16(out[10:]))
	}
	pseudo := uint32(0xc613) + 0x0001 + 0xc613 + 0x0002 + unix.IPPROTO_TCP + uint32(len(pkt)-20)
	if be.Uint16(out[36:]) != fold16(pseudo) {
		t.Errorf("TCP checksum field %#04x, want the pseudo-header's partial sum %#04x", be.Uint16(out[36:]), fold16(pseudo))
	}
	segs := uint64((len(payload) + mss - 1) / mss)
	if s, sends, r, recvs := tf.datagrams(); s != 11*segs || r != 11*segs || sends != 11 || recvs != 11 {
		t.Errorf("%d datagrams in %d sends, %d in %d receives; want %d in 11 each", s, sends, r, recvs, 11*segs)
	}
}

// TestTunnelFloorTUNDown: a datagram that comes before the floor's TUN
// device is up (the peer end's first packets, while the caller still
// addresses this end's device) is dropped, as the kernel drops what a
// device that is down is given, and the floor keeps running.
func TestTunnelFloorTUNDown(t *testing.T) {
	requireRoot(t)
	ns := netlab.NewT(t, "floordown")
	netlab.Must(t, ns.LinkUp("lo"))
	local, peer := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	end, err := openTunnelFloor(ns, local, peer)
	netlab.Must(t, err)
	var sock int
	ns.Do(t, func() {
		sock, err = tunnelFloorSocket(peer, local)
		netlab.Must(t, err)
	})
	defer unix.Close(sock)
	pkt := make([]byte, 28) // an IPv4 UDP packet, its contents immaterial
	pkt[0], pkt[3], pkt[9] = 0x45, 28, unix.IPPROTO_UDP
	tf := end.(*tunnelFloor)
	for i := 0; i < 2; i++ { // the second is received only once the first has been written
		netlab.Must(t, unix.Send(sock, pkt, 0))
	}
	deadline := time.Now().Add(10 * time.Second)
	for tf.recvs.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := end.stop(); err != nil || tf.recvs.Load() < 2 {
		t.Fatalf("%d of 2 datagrams received; stop: %v", tf.recvs.Load(), err)
	}
}
