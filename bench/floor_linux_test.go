package main

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
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
		got := make([]byte, floorBufSize)
		allocs := testing.AllocsPerRun(20, func() {
			unix.Write(inW, in)
			if ok, err := p(buf, hdr); !ok || err != nil {
				t.Fatalf("pump: %v %v", ok, err)
			}
			n, _ := unix.Read(outR, got)
			got = got[:n]
		})
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
		got := make([]byte, floorBufSize)
		for i := range hdr {
			hdr[i] = 0xee // dirty: the TUN header's tail must be zero
		}
		allocs := testing.AllocsPerRun(20, func() {
			unix.Write(inW, frame)
			if ok, err := p(buf, hdr); !ok || err != nil {
				t.Fatalf("pump: %v %v", ok, err)
			}
			n, _ := unix.Read(outR, got)
			got = got[:n]
		})
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
		got := make([]byte, floorBufSize)
		allocs := testing.AllocsPerRun(20, func() {
			unix.Write(inW, frame)
			if ok, err := p(buf, hdr); !ok || err != nil {
				t.Fatalf("pump: %v %v", ok, err)
			}
			n, _ := unix.Read(outR, got)
			got = got[:n]
		})
		if !bytes.Equal(got[:floorVnet], frame[:floorVnet]) || !bytes.Equal(got[floorVnet:floorPkt], to[:]) || !bytes.Equal(got[floorPkt:], ipPkt) {
			t.Errorf("frame sent: header % x, Ethernet % x", got[:floorVnet], got[floorVnet:floorPkt])
		}
		if allocs != 0 {
			t.Errorf("%v allocations per packet", allocs)
		}
	})
}
