package afpacket

// Measurements that chose the port's mechanisms: batched sendmmsg(2)
// against a TPACKET_V2 TX ring, batched recvmmsg(2) against a TPACKET_V3
// RX ring, on the reference topology's veth pair, same socket options:
//
//	sudo go test -run '^$' -bench 'TXMechanism|RXMechanism' -benchtime 2000000x ./dataplane/afpacket
//	sudo go test -run '^$' -bench RXLatency -benchtime 3000x ./dataplane/afpacket
//	sudo go test -run '^$' -bench StreamMechanism -benchtime 1024x ./dataplane/afpacket
//	sudo go test -run '^$' -bench TXSuper -benchtime 20000x -count 4 ./dataplane/afpacket
//
// TX reports Mpps and CPU time per frame; RX the same while a generator
// in B floods the port; RXLatency the latency of a lone packet;
// StreamMechanism TCP through a TUN, the pipeline and the port, b.N MiB
// each way; TXSuper the CPU time per 64 KiB super-packet handed to the
// NIC whole, sent with sendmmsg or from a TX ring. CPU time is this process's (user and system): the machine
// may be shared.

import (
	"encoding/binary"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/gsoplane/gsoplane/dataplane/frame"
	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/internal/mmsg"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
	"github.com/gsoplane/gsoplane/segment"
)

// udpFrame builds a virtio-net header (all zero) and an Ethernet/IPv4/UDP
// frame of frameLen bytes (Ethernet included) with complete checksums.
func udpFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.AddrPort, frameLen int) []byte {
	b := make([]byte, vnetHdrLen+frameLen)
	eth := header.Ethernet(b[vnetHdrLen:])
	eth.Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(srcMAC), DstAddr: tcpip.LinkAddress(dstMAC), Type: header.IPv4ProtocolNumber})
	ip := header.IPv4(b[Headroom:])
	ipLen := frameLen - ethernet.HeaderLen
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(ipLen), TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
		SrcAddr: tcpip.AddrFrom4(src.Addr().As4()), DstAddr: tcpip.AddrFrom4(dst.Addr().As4())})
	ip.SetChecksum(^ip.CalculateChecksum())
	udp := header.UDP(ip.Payload())
	udp.Encode(&header.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: uint16(ipLen - header.IPv4MinimumSize)})
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), udp.Length())
	udp.SetChecksum(^udp.CalculateChecksum(checksum.Checksum(udp.Payload(), xsum)))
	return b
}

// cpuTime returns the CPU time this process has used so far, user and
// system (the kernel work of its system calls and of the softirqs they
// run): other processes on the machine do not count.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rawTXSocket opens a bare packet socket on ifindex, set up as the port's
// are (virtio-net header, qdisc bypass), for TX only.
func rawTXSocket(tb testing.TB, ifindex int) int {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	for _, o := range [][3]int{{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1}, {unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1}, {unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4 << 20}} {
		netlab.Must(tb, unix.SetsockoptInt(fd, o[0], o[1], o[2]))
	}
	netlab.Must(tb, unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}))
	return fd
}

// sendAll sends frame n times with sendmmsg batches of 64 on fd, waiting
// with poll when the send buffer is full.
func sendAll(fd int, frame []byte, n int, stop *atomic.Bool) int {
	m := mmsg.New(sinkBatch)
	for i := range sinkBatch {
		m.Set(i, frame)
	}
	sent := 0
	for sent < n && (stop == nil || !stop.Load()) {
		k, e := m.Send(uintptr(fd), 0, min(sinkBatch, n-sent))
		switch e {
		case 0:
			sent += k
		case unix.EAGAIN, unix.ENOBUFS:
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, 1)
		default:
			panic(e)
		}
	}
	return sent
}

// benchTX opens the sending side of a mechanism benchmark in A: a raw
// socket for "sendmmsg", else a TX ring of frames slots of frameSize
// bytes (closed in b.Cleanup).
func benchTX(b *testing.B, l *lab, ifindex int, mech string, frameSize, frames int) (fd int, ring *txRing) {
	l.A.Do(b, func() {
		if mech == "sendmmsg" {
			fd = rawTXSocket(b, ifindex)
			return
		}
		var err error
		if ring, err = newTXRing(ifindex, frameSize, frames); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(ring.close)
	})
	return fd, ring
}

// ringSend sends n frames through ring, batch at a time: queue(k) puts up
// to k frames on the ring and returns how many; the ring is kicked after
// each batch and waited on while it is full.
func ringSend(b *testing.B, ring *txRing, n, batch int, queue func(k int) int) {
	for sent := 0; sent < n; {
		k := queue(min(batch, n-sent))
		sent += k
		if err := ring.kick(); err != nil {
			b.Fatal(err)
		}
		if k == 0 {
			unix.Poll([]unix.PollFd{{Fd: int32(ring.fd), Events: unix.POLLOUT}}, 1)
		}
	}
}

// BenchmarkTXMechanism sends b.N frames from gw-a to gw-b (which drops
// them: their destination MAC is not its own) with each mechanism.
func BenchmarkTXMechanism(b *testing.B) {
	for _, size := range []int{60, 1514} {
		for _, mech := range []string{"sendmmsg", "txring"} {
			b.Run(mech+"/"+strconv.Itoa(size), func(b *testing.B) {
				l := newLab(b, false)
				gw := l.A.LinkT(b, netlab.NICA)
				frame := udpFrame(net.HardwareAddr{2, 0, 0, 0, 0, 1}, gw.Attrs().HardwareAddr,
					netip.AddrPortFrom(netlab.NICA4, 1000), netip.AddrPortFrom(netlab.NICB4, 9), size)
				fd, ring := benchTX(b, l, gw.Attrs().Index, mech, 2048, 1024)
				frames := make([][]byte, sinkBatch)
				for i := range frames {
					frames[i] = frame
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				cpu0, start := cpuTime(), time.Now()
				b.ResetTimer()
				if mech == "sendmmsg" {
					sendAll(fd, frame, b.N, nil)
				} else {
					ringSend(b, ring, b.N, sinkBatch, func(k int) int { return ring.put(frames[:k]) })
				}
				b.StopTimer()
				el, cpu := time.Since(start), cpuTime()-cpu0
				b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "Mpps")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/frame")
			})
		}
	}
}

// rxGenerator floods gw-a from gw-b with UDP frames to the application's
// address (a redirected prefix) until stop is set; it returns how many
// it sent.
func rxGenerator(b *testing.B, l *lab, size int, stop *atomic.Bool) func() int {
	gwA, gwB := l.A.LinkT(b, netlab.NICA), l.B.LinkT(b, netlab.NICB)
	frame := udpFrame(gwA.Attrs().HardwareAddr, gwB.Attrs().HardwareAddr,
		netip.AddrPortFrom(netlab.Srv4, 1000), netip.AddrPortFrom(netlab.App4, 9), size)
	var fd int
	l.B.Do(b, func() { fd = rawTXSocket(b, gwB.Attrs().Index) })
	var sent atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sent.Store(int64(sendAll(fd, frame, 1<<62, stop)))
	}()
	return func() int { stop.Store(true); wg.Wait(); return int(sent.Load()) }
}

// BenchmarkRXMechanism receives b.N frames on gw-a with each mechanism
// while a generator in B floods it.
func BenchmarkRXMechanism(b *testing.B) {
	for _, size := range []int{60, 1514} {
		for _, mech := range []string{"recvmmsg", "v3ring"} {
			b.Run(mech+"/"+strconv.Itoa(size), func(b *testing.B) {
				l := newLab(b, false)
				next := rxSide(b, l, mech, 1)
				var stop atomic.Bool
				b.SetBytes(int64(size))
				b.ReportAllocs()
				cpu0, start := cpuTime(), time.Now()
				wait := rxGenerator(b, l, size, &stop)
				b.ResetTimer()
				got := 0
				for got < b.N {
					got += next(nil)
				}
				b.StopTimer()
				el, cpu := time.Since(start), cpuTime()-cpu0
				sent := wait()
				b.ReportMetric(float64(got)/el.Seconds()/1e6, "Mpps")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(got), "cpu-ns/frame")
				b.ReportMetric(float64(sent-got)/float64(sent)*100, "%lost")
				if l.port != nil {
					st := l.port.Sockets()[0].Stats()
					b.ReportMetric(float64(st.RX)/float64(st.RXCalls), "frames/call")
				}
			})
		}
	}
}

// rxSide opens the receiving side of a mechanism on gw-a and returns a
// function that receives what is there (waiting up to ms) and calls fn
// on each frame's packet.
func rxSide(b *testing.B, l *lab, mech string, ms int) func(fn func([]byte)) int {
	if mech == "recvmmsg" {
		p := l.open(b, Config{Queues: 1})
		r := p.Sockets()[0].Receiver()
		frames := make([][]byte, rxBatch)
		return func(fn func([]byte)) int {
			n, err := r.Receive(frames)
			if err != nil {
				b.Fatal(err)
			}
			if fn != nil {
				for _, f := range frames[:n] {
					fn(f[Headroom:])
				}
			}
			return n
		}
	}
	var ring *rxRingV3
	l.A.Do(b, func() {
		f, err := newFilter(HostFilterAuto)
		netlab.Must(b, err)
		b.Cleanup(func() { f.close() })
		netlab.Must(b, f.setPrefixes(netlab.AppRoutes))
		gw := l.A.LinkT(b, netlab.NICA)
		netlab.Must(b, f.attach(netlab.NICA, gw.Attrs().Index))
		ring, err = newRXRingV3(gw.Attrs().Index, 1<<20, 16, ms, f)
		netlab.Must(b, err)
		b.Cleanup(ring.close)
	})
	return func(fn func([]byte)) int {
		n, err := ring.next(50, func(p []byte) {
			if fn != nil {
				fn(p[Headroom:])
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
}

// BenchmarkRXLatency sends b.N lone timestamped packets from B, 200 µs
// apart, and reports how long each took to reach the receiver.
func BenchmarkRXLatency(b *testing.B) {
	for _, mech := range []string{"recvmmsg", "v3ring"} {
		b.Run(mech, func(b *testing.B) {
			l := newLab(b, false)
			next := rxSide(b, l, mech, 1)
			gwA, gwB := l.A.LinkT(b, netlab.NICA), l.B.LinkT(b, netlab.NICB)
			frame := udpFrame(gwA.Attrs().HardwareAddr, gwB.Attrs().HardwareAddr,
				netip.AddrPortFrom(netlab.Srv4, 1000), netip.AddrPortFrom(netlab.App4, 9), 128)
			var fd int
			l.B.Do(b, func() { fd = rawTXSocket(b, gwB.Attrs().Index) })
			var lat []time.Duration
			var stop atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread()
				for len(lat) < b.N && !stop.Load() {
					next(func(p []byte) {
						ts := int64(binary.BigEndian.Uint64(p[header.IPv4MinimumSize+header.UDPMinimumSize:]))
						lat = append(lat, time.Duration(time.Now().UnixNano()-ts))
					})
				}
			}()
			b.Cleanup(func() { stop.Store(true); <-done }) // before the ring goes
			b.ResetTimer()
			for range b.N {
				binary.BigEndian.PutUint64(frame[Headroom+header.IPv4MinimumSize+header.UDPMinimumSize:], uint64(time.Now().UnixNano()))
				// The UDP checksum no longer matches: the receiver does not care.
				if _, err := unix.Write(fd, frame); err != nil {
					b.Fatal(err)
				}
				time.Sleep(200 * time.Microsecond)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second): // some were lost
				stop.Store(true)
				<-done
			}
			b.StopTimer()
			if len(lat) == 0 {
				b.Fatal("nothing received")
			}
			b.ReportMetric(float64(b.N-len(lat)), "lost")
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "µs-p50")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "µs-p99")
		})
	}
}

// BenchmarkStreamMechanism moves b.N MiB of TCP through the test gateway
// (TUN in A, the port on gw-a, GRO on gw-a) each way, with the port's
// recvmmsg receiver and with a TPACKET_V3 ring on the same socket
// (blocks retired after 1 ms, the shortest the kernel allows).
func BenchmarkStreamMechanism(b *testing.B) {
	for _, mech := range []string{"recvmmsg", "v3ring"} {
		for _, toA := range []bool{false, true} {
			name := mech + "/toB"
			if toA {
				name = mech + "/toA"
			}
			b.Run(name, func(b *testing.B) {
				l := newLab(b, true)
				newRecv := func(s *Socket) frame.HeaderReceiver { return s.Receiver() }
				if mech == "v3ring" {
					newRecv = func(s *Socket) frame.HeaderReceiver {
						rr, err := newRingReceiver(s, 1<<20, 32, 1)
						netlab.Must(b, err)
						b.Cleanup(rr.close)
						return rr
					}
				}
				l.gatewayWith(b, Config{Queues: 1}, GSOModeAuto, newRecv)
				b.SetBytes(1 << 20)
				cpu0 := cpuTime()
				b.ResetTimer()
				d := netlab.TCPTransfer(b, l.A, l.B, netip.AddrPortFrom(netlab.Srv4, 5201), int64(b.N)<<20, toA)
				b.StopTimer()
				b.ReportMetric(float64(int64(b.N)<<23)/d.Seconds()/1e9, "Gbit/s")
				b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(int64(b.N)<<20)*1e3, "cpu-ps/byte")
			})
		}
	}
}

// tcpSuperFrame builds a virtio-net header for a TCP/IPv4 super-packet
// the NIC segments (partial checksum, MSS 1448) and its Ethernet frame,
// segs full segments long.
func tcpSuperFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.AddrPort, segs int) []byte {
	const mss, hdrs = 1448, header.IPv4MinimumSize + header.TCPMinimumSize
	ipLen := hdrs + segs*mss
	b := make([]byte, Headroom+ipLen)
	vnet := segment.Header{Flags: segment.FlagNeedsCsum, GSOType: segment.GSOTCPv4, HdrLen: ethernet.HeaderLen + hdrs,
		GSOSize: mss, CsumStart: ethernet.HeaderLen + header.IPv4MinimumSize, CsumOffset: 16}
	vnet.Encode(b, vnetHdrLen)
	eth := header.Ethernet(b[vnetHdrLen:])
	eth.Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(srcMAC), DstAddr: tcpip.LinkAddress(dstMAC), Type: header.IPv4ProtocolNumber})
	ip := header.IPv4(b[Headroom:])
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(ipLen), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: tcpip.AddrFrom4(src.Addr().As4()), DstAddr: tcpip.AddrFrom4(dst.Addr().As4())})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(ip.Payload())
	tcp.Encode(&header.TCPFields{SrcPort: src.Port(), DstPort: dst.Port(), DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 65535})
	tcp.SetChecksum(header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(ipLen-header.IPv4MinimumSize)))
	return b
}

// BenchmarkTXSuper sends b.N 64 KiB TCP super-packets (45 segments) from
// gw-a to gw-b, which drops them (their destination MAC is not its own),
// three ways: sendmmsg from user memory, as the sink does (the kernel
// copies each into a new skb); a TPACKET_V2 TX ring whose slots already
// hold the packet, as if it had been read there (the kernel attaches the
// slot's pages to the skb; the veth copies them, skb_orphan_frags in
// ____dev_forward_skb, since the skb's frags are user memory); and the
// ring with a copy into the slot first (what the ring costs when the
// packet is not read into it).
func BenchmarkTXSuper(b *testing.B) {
	const segs, slots = 45, 16
	for _, mech := range []string{"sendmmsg", "txring", "txring-copy"} {
		b.Run(mech, func(b *testing.B) {
			l := newLab(b, false)
			gw := l.A.LinkT(b, netlab.NICA)
			frame := tcpSuperFrame(net.HardwareAddr{2, 0, 0, 0, 0, 1}, gw.Attrs().HardwareAddr,
				netip.AddrPortFrom(netlab.NICA4, 1000), netip.AddrPortFrom(netlab.NICB4, 9), segs)
			fd, ring := benchTX(b, l, gw.Attrs().Index, mech, 1<<16, slots)
			if ring != nil { // every slot holds the packet
				for i := range slots {
					copy(ring.slot(i)[tpacket2HdrLen:], frame)
				}
			}
			b.SetBytes(int64(len(frame) - Headroom))
			b.ReportAllocs()
			cpu0, start := cpuTime(), time.Now()
			b.ResetTimer()
			switch mech {
			case "sendmmsg":
				sendAll(fd, frame, b.N, nil)
			default:
				frames := make([][]byte, slots)
				for i := range frames {
					frames[i] = frame
				}
				ringSend(b, ring, b.N, slots, func(k int) int {
					if mech == "txring" {
						return ring.request(len(frame), k)
					}
					return ring.put(frames[:k])
				})
			}
			b.StopTimer()
			el, cpu := time.Since(start), cpuTime()-cpu0
			b.ReportMetric(float64(b.N)*float64(len(frame)-Headroom)*8/el.Seconds()/1e9, "Gbit/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/super")
		})
	}
}

// TestNoZeroCopySend: MSG_ZEROCOPY is not a way to send without a copy
// on a packet socket: the kernel allows SO_ZEROCOPY only on TCP, UDP,
// RDS (and, on recent kernels, vsock) sockets (sk_setsockopt, net/core/
// sock.c) and says EOPNOTSUPP to any other, and packet_snd copies the
// message into a new skb whatever the flags (skb_copy_datagram_from_iter,
// net/packet/af_packet.c). Should a kernel accept it one day, this fails
// and the choice is to be measured again.
func TestNoZeroCopySend(t *testing.T) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ZEROCOPY, 1); err != unix.EOPNOTSUPP {
		t.Errorf("SO_ZEROCOPY on a packet socket: %v, want EOPNOTSUPP", err)
	}
}
