package segment

import (
	"fmt"
	"testing"
)

// BenchmarkForWire measures ForWire on the packets a wire port sees, side
// by side with Validate of the header it returns (what the forwarder does
// next anyway) and with Split, the work the header leads to: a 64 KiB TCP
// super-packet from a TSO peer (partial checksum: no pass over the
// payload), the same with a complete checksum (one verifying pass), a
// 9000-byte jumbo segment, a 64 KiB UDP datagram for UFO and small
// packets that fit.
func BenchmarkForWire(b *testing.B) {
	const mtu = 1500
	shapes := []struct {
		name string
		spec superSpec
	}{
		{"tcp4-64k-partial", superSpec{proto: tcp, payload: 65535 - 40, needsCsum: true, df: true, seed: 1}},
		{"tcp4-64k-complete", superSpec{proto: tcp, payload: 65535 - 40, df: true, seed: 1}},
		{"tcp6-64k-partial", superSpec{v6: true, proto: tcp, payload: 65535 - 20, needsCsum: true, seed: 2}},
		{"tcp4-9k-complete", superSpec{proto: tcp, payload: 9000 - 52, tcpOpts: tsOpt, df: true, seed: 3}},
		{"udp4-64k-partial", superSpec{proto: udp, payload: 65535 - 28, needsCsum: true, seed: 4}},
		{"tcp4-1500-complete", superSpec{proto: tcp, payload: 1460, df: true, seed: 5}},
		{"udp4-64B-complete", superSpec{proto: udp, payload: 64 - 28, seed: 6}},
		{"udp4-64B-partial", superSpec{proto: udp, payload: 64 - 28, needsCsum: true, seed: 6}},
		{"udp6-64B-complete", superSpec{v6: true, proto: udp, payload: 64 - 48, seed: 7}},
	}
	for _, sh := range shapes {
		pkt := wirePacket(sh.spec)
		h, _, err := std.ForWire(pkt, mtu, 0)
		if err != nil {
			b.Fatal(err)
		}
		l, err := Validate(pkt, h)
		if err != nil {
			b.Fatal(err)
		}
		bufs, sizes := splitBuffers(l, 0)
		run := func(what string, f func() error) {
			b.Run(fmt.Sprintf("%s/%s", sh.name, what), func(b *testing.B) {
				b.SetBytes(int64(len(pkt)))
				b.ReportAllocs()
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		run("ForWire", func() error { _, _, err := std.ForWire(pkt, mtu, 0); return err })
		run("Validate", func() error { _, err := Validate(pkt, h); return err })
		run("ForWire+Validate+Split", func() error {
			h, _, err := std.ForWire(pkt, mtu, 0)
			if err != nil {
				return err
			}
			l, err := Validate(pkt, h)
			if err != nil {
				return err
			}
			_, err = std.Split(pkt, l, bufs, sizes, 0)
			return err
		})
	}
}

// BenchmarkClamp measures Clamp of a SYN whose MSS it lowers, and
// ParseTCP with Announced of a packet that is not a handshake (every
// packet through an MSS table pays it).
func BenchmarkClamp(b *testing.B) {
	syn, ack := flow4(1).syn(8960), flow4(1).pkt(flagACK, tsOpt, 1448)
	b.Run("Clamp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			syn[20+22], syn[20+23] = 0x23, 0x00
			Clamp(syn, 1500)
		}
	})
	b.Run("Announced-ACK", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tcp, _ := ParseTCP(ack)
			tcp.Announced(ack)
		}
	})
}
