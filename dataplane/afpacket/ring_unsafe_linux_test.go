package afpacket

// The mechanisms the port does not use, kept to measure them against the
// ones it does (BenchmarkTXMechanism, BenchmarkRXMechanism): a
// TPACKET_V2 TX ring and a TPACKET_V3 RX ring on AF_PACKET sockets with
// the same options as the port's (virtio-net header, qdisc bypass).
// Ring memory is shared with the kernel: status words go through
// sync/atomic, hence package unsafe.

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/ethernet"
	"github.com/gsoplane/gsoplane/segment"
)

// ringStatus returns the status word at the front of a ring frame/block
// header (tp_status of tpacket2_hdr; block_status of a V3 block: both are
// the first 32-bit word after any fixed prefix the caller skipped).
func ringStatus(b []byte) *uint32 { return (*uint32)(unsafe.Pointer(&b[0])) }

// txRing is a TPACKET_V2 TX ring on a bound packet socket.
type txRing struct {
	fd        int
	mem       []byte
	frameSize int
	frames    int
	head      int // next slot to fill
}

const (
	tpacket2HdrLen = 32 // TPACKET_ALIGN(sizeof(struct tpacket2_hdr)): data follows (tp_hdrlen - sizeof(sockaddr_ll))
)

// newTXRing opens a socket on ifindex with a TX ring of frames slots of
// frameSize bytes.
func newTXRing(ifindex, frameSize, frames int) (*txRing, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	r := &txRing{fd: fd, frameSize: frameSize, frames: frames}
	if err := r.setup(ifindex); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *txRing) setup(ifindex int) error {
	for _, o := range [][2]int{{unix.PACKET_VNET_HDR, 1}, {unix.PACKET_VERSION, unix.TPACKET_V2}, {unix.PACKET_QDISC_BYPASS, 1}} {
		if err := unix.SetsockoptInt(r.fd, unix.SOL_PACKET, o[0], o[1]); err != nil {
			return fmt.Errorf("setsockopt %d: %w", o[0], err)
		}
	}
	if err := unix.SetsockoptInt(r.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20); err != nil {
		return err
	}
	block := 1 << 16
	req := unix.TpacketReq{Block_size: uint32(block), Block_nr: uint32(r.frames * r.frameSize / block),
		Frame_size: uint32(r.frameSize), Frame_nr: uint32(r.frames)}
	if err := unix.SetsockoptTpacketReq(r.fd, unix.SOL_PACKET, unix.PACKET_TX_RING, &req); err != nil {
		return fmt.Errorf("PACKET_TX_RING: %w", err)
	}
	mem, err := unix.Mmap(r.fd, 0, block*int(req.Block_nr), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	r.mem = mem
	return unix.Bind(r.fd, &unix.SockaddrLinklayer{Ifindex: ifindex})
}

func (r *txRing) close() {
	if r.mem != nil {
		unix.Munmap(r.mem)
	}
	unix.Close(r.fd)
}

func (r *txRing) slot(i int) []byte { return r.mem[i*r.frameSize : (i+1)*r.frameSize] }

// put copies frames (virtio-net header first) into free slots and asks
// for them to be sent; it returns how many it placed.
func (r *txRing) put(frames [][]byte) int {
	n := 0
	for _, f := range frames {
		s := r.slot(r.head)
		if atomic.LoadUint32(ringStatus(s)) != unix.TP_STATUS_AVAILABLE {
			break
		}
		copy(s[tpacket2HdrLen:], f)
		binary.NativeEndian.PutUint32(s[4:], uint32(len(f))) // tp_len
		atomic.StoreUint32(ringStatus(s), unix.TP_STATUS_SEND_REQUEST)
		r.head = (r.head + 1) % r.frames
		n++
	}
	return n
}

// request asks for the frames already in the next free slots, frames
// of length n (virtio-net header first), to be sent, up to max of them,
// without copying anything; it returns how many it asked for.
func (r *txRing) request(n, max int) int {
	k := 0
	for ; k < max; k++ {
		s := r.slot(r.head)
		if atomic.LoadUint32(ringStatus(s)) != unix.TP_STATUS_AVAILABLE {
			break
		}
		binary.NativeEndian.PutUint32(s[4:], uint32(n)) // tp_len
		atomic.StoreUint32(ringStatus(s), unix.TP_STATUS_SEND_REQUEST)
		r.head = (r.head + 1) % r.frames
	}
	return k
}

// kick sends what is marked SEND_REQUEST, without waiting for completion.
func (r *txRing) kick() error {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(r.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 && e != unix.EAGAIN && e != unix.ENOBUFS {
		return os.NewSyscallError("sendto", e)
	}
	return nil
}

// rxRingV3 is a TPACKET_V3 RX ring on a bound packet socket.
type rxRingV3 struct {
	fd        int
	mem       []byte
	blockSize int
	blocks    int
	cur       int
}

// newRXRingV3 opens a socket on ifindex with blocks blocks of blockSize
// bytes, retired after tov ms at the latest, with the socket filter f.
func newRXRingV3(ifindex, blockSize, blocks, tov int, f *filter) (*rxRingV3, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	r := &rxRingV3{fd: fd, blockSize: blockSize, blocks: blocks}
	if err := r.setup(ifindex, tov, f); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *rxRingV3) setup(ifindex, tov int, f *filter) error {
	for _, o := range [][2]int{{unix.PACKET_VNET_HDR, 1}, {unix.PACKET_VERSION, unix.TPACKET_V3}} {
		if err := unix.SetsockoptInt(r.fd, unix.SOL_PACKET, o[0], o[1]); err != nil {
			return fmt.Errorf("setsockopt %d: %w", o[0], err)
		}
	}
	frame := 1 << 11
	req := unix.TpacketReq3{Block_size: uint32(r.blockSize), Block_nr: uint32(r.blocks), Frame_size: uint32(frame),
		Frame_nr: uint32(r.blockSize / frame * r.blocks), Retire_blk_tov: uint32(tov)}
	if err := unix.SetsockoptTpacketReq3(r.fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fmt.Errorf("PACKET_RX_RING: %w", err)
	}
	mem, err := unix.Mmap(r.fd, 0, r.blockSize*r.blocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	r.mem = mem
	if err := f.attachSocket(r.fd); err != nil {
		return err
	}
	return unix.Bind(r.fd, &unix.SockaddrLinklayer{Protocol: ethPAll, Ifindex: ifindex})
}

func (r *rxRingV3) close() {
	if r.mem != nil {
		unix.Munmap(r.mem)
	}
	unix.Close(r.fd)
}

// next calls fn for every packet (virtio-net header first) of the next
// retired block, waiting for it with poll(2) up to ms milliseconds, and
// gives the block back; it returns how many packets it saw.
func (r *rxRingV3) next(ms int, fn func(pkt []byte)) (int, error) {
	blk := r.mem[r.cur*r.blockSize : (r.cur+1)*r.blockSize]
	status := (*uint32)(unsafe.Pointer(&blk[8])) // tpacket_block_desc.hdr.bh1.block_status
	if atomic.LoadUint32(status)&unix.TP_STATUS_USER == 0 {
		pfd := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, ms); err != nil && err != unix.EINTR {
			return 0, err
		}
		if atomic.LoadUint32(status)&unix.TP_STATUS_USER == 0 {
			return 0, nil
		}
	}
	num := int(binary.NativeEndian.Uint32(blk[12:]))
	off := int(binary.NativeEndian.Uint32(blk[16:]))
	for range num {
		h := blk[off:]
		snap := int(binary.NativeEndian.Uint32(h[12:]))
		mac := int(binary.NativeEndian.Uint16(h[24:]))
		fn(h[mac-vnetHdrLen : mac+snap])
		off += int(binary.NativeEndian.Uint32(h[0:]))
	}
	atomic.StoreUint32(status, unix.TP_STATUS_KERNEL)
	r.cur = (r.cur + 1) % r.blocks
	return num, nil
}

// ringReceiver is a frame.HeaderReceiver on a port socket turned into
// a TPACKET_V3 RX ring (the socket stays in its fanout group; its
// prot_hook becomes tpacket_rcv): what the port would be with a ring.
type ringReceiver struct {
	r       *rxRingV3
	hdrs    []segment.Header
	n       int
	release int // a block to give back on the next Receive, or -1
	left    int // packets of the current block not yet handed out
	off     int // offset of the next of them
}

// newRingReceiver gives socket s a V3 ring of blocks blocks of blockSize
// bytes retired after tov ms.
func newRingReceiver(s *Socket, blockSize, blocks, tov int) (*ringReceiver, error) {
	r := &rxRingV3{fd: s.fd, blockSize: blockSize, blocks: blocks}
	if err := unix.SetsockoptInt(s.fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return nil, err
	}
	req := unix.TpacketReq3{Block_size: uint32(blockSize), Block_nr: uint32(blocks), Frame_size: 2048,
		Frame_nr: uint32(blockSize / 2048 * blocks), Retire_blk_tov: uint32(tov)}
	if err := unix.SetsockoptTpacketReq3(s.fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(s.fd, 0, blockSize*blocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	r.mem = mem
	return &ringReceiver{r: r, hdrs: make([]segment.Header, rxBatch), release: -1}, nil
}

func (rr *ringReceiver) close() { unix.Munmap(rr.r.mem) }

func (rr *ringReceiver) Headroom() int { return Headroom }

func (rr *ringReceiver) Header(i int) segment.Header {
	if i < 0 || i >= rr.n {
		return segment.Header{}
	}
	return rr.hdrs[i]
}

func (rr *ringReceiver) block(i int) []byte {
	return rr.r.mem[i*rr.r.blockSize : (i+1)*rr.r.blockSize]
}

func (rr *ringReceiver) Receive(frames [][]byte) (int, error) {
	rr.n = 0
	if rr.release >= 0 {
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&rr.block(rr.release)[8])), unix.TP_STATUS_KERNEL)
		rr.release = -1
	}
	blk := rr.block(rr.r.cur)
	status := (*uint32)(unsafe.Pointer(&blk[8]))
	if rr.left == 0 {
		if atomic.LoadUint32(status)&unix.TP_STATUS_USER == 0 {
			pfd := []unix.PollFd{{Fd: int32(rr.r.fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(pfd, 50); err != nil && err != unix.EINTR {
				return 0, err
			}
			if atomic.LoadUint32(status)&unix.TP_STATUS_USER == 0 {
				return 0, nil
			}
		}
		rr.left = int(binary.NativeEndian.Uint32(blk[12:]))
		rr.off = int(binary.NativeEndian.Uint32(blk[16:]))
	}
	n := 0
	for ; n < min(len(frames), rxBatch) && rr.left > 0; n++ {
		h := blk[rr.off:]
		snap := int(binary.NativeEndian.Uint32(h[12:]))
		mac := int(binary.NativeEndian.Uint16(h[24:]))
		f := h[mac-vnetHdrLen : mac+snap]
		rr.hdrs[n] = segment.Header{}
		if !ethernet.IsIP(f[vnetHdrLen:]) {
			frames[n] = f[:Headroom]
		} else {
			hd, _ := segment.DecodeHeader(f, vnetHdrLen)
			if hd.NeedsCsum() {
				hd.CsumStart -= ethernet.HeaderLen
			}
			hd.HdrLen = uint16(min(max(int(hd.HdrLen)-ethernet.HeaderLen, 0), snap-ethernet.HeaderLen))
			rr.hdrs[n] = hd
			frames[n] = f
		}
		rr.off += int(binary.NativeEndian.Uint32(h[0:]))
		rr.left--
	}
	if rr.left == 0 {
		rr.release = rr.r.cur
		rr.r.cur = (rr.r.cur + 1) % rr.r.blocks
	}
	rr.n = n
	return n, nil
}
