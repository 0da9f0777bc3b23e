package xsk

// The kernel structures and shared rings of AF_XDP sockets: everything in
// the AF_XDP port that needs package unsafe lives here. The rings are
// memory shared with the kernel; their producer and consumer indices are
// only ever read and written through sync/atomic (asavie/xdp uses plain
// loads and stores, which is one reason we do not use its Socket).

import (
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xskRing is the part common to the four rings of an AF_XDP socket: the
// shared producer and consumer indices and flags, and our private copy of
// the index we own (the producer of the fill and TX rings, the consumer of
// the RX and completion rings).
type xskRing struct {
	producer *uint32 // shared with the kernel: atomic access only
	consumer *uint32 // shared with the kernel: atomic access only
	flags    *uint32 // shared with the kernel: atomic access only
	mask     uint32
	size     uint32
	local    uint32 // our index: producer (fill, TX) or consumer (RX, completion)
	mem      []byte // the mapping, for munmap
}

// xskAddrRing is a fill or completion ring: entries are UMEM addresses.
type xskAddrRing struct {
	xskRing
	descs []uint64
}

// xskDescRing is an RX or TX ring: entries are descriptors.
type xskDescRing struct {
	xskRing
	descs []unix.XDPDesc
}

// loadProducer reads the shared producer index.
func (r *xskRing) loadProducer() uint32 { return atomic.LoadUint32(r.producer) }

// loadConsumer reads the shared consumer index.
func (r *xskRing) loadConsumer() uint32 { return atomic.LoadUint32(r.consumer) }

// publishProducer makes entries up to local visible to the kernel.
func (r *xskRing) publishProducer() { atomic.StoreUint32(r.producer, r.local) }

// publishConsumer gives entries up to local back to the kernel.
func (r *xskRing) publishConsumer() { atomic.StoreUint32(r.consumer, r.local) }

// needWakeup reports whether the kernel asks to be kicked (XDP_USE_NEED_WAKEUP).
func (r *xskRing) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// unmap releases the ring's mapping.
func (r *xskRing) unmap() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem, r.producer, r.consumer, r.flags = nil, nil, nil, nil
	return err
}

// mapXskRing maps the ring at page offset pgoff of fd.
func mapXskRing(fd int, pgoff int64, off unix.XDPRingOffset, entries, entrySize uint32) (xskRing, error) {
	length := int(off.Desc) + int(entries)*int(entrySize)
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return xskRing{}, os.NewSyscallError("mmap", err)
	}
	return xskRing{
		producer: (*uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*uint32)(unsafe.Pointer(&mem[off.Flags])),
		mask:     entries - 1,
		size:     entries,
		mem:      mem,
	}, nil
}

// mapXskAddrRing maps a fill or completion ring.
func mapXskAddrRing(fd int, pgoff int64, off unix.XDPRingOffset, entries uint32) (xskAddrRing, error) {
	r, err := mapXskRing(fd, pgoff, off, entries, 8)
	if err != nil {
		return xskAddrRing{}, err
	}
	descs := unsafe.Slice((*uint64)(unsafe.Pointer(&r.mem[off.Desc])), entries)
	return xskAddrRing{xskRing: r, descs: descs}, nil
}

// mapXskDescRing maps an RX or TX ring.
func mapXskDescRing(fd int, pgoff int64, off unix.XDPRingOffset, entries uint32) (xskDescRing, error) {
	r, err := mapXskRing(fd, pgoff, off, entries, uint32(unsafe.Sizeof(unix.XDPDesc{})))
	if err != nil {
		return xskDescRing{}, err
	}
	descs := unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&r.mem[off.Desc])), entries)
	return xskDescRing{xskRing: r, descs: descs}, nil
}

// xskSetsockopt sets a SOL_XDP option whose value is a kernel structure.
func xskSetsockopt(fd, opt int, val unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(val), size, 0)
	if e != 0 {
		return os.NewSyscallError("setsockopt", e)
	}
	return nil
}

// xskGetsockopt reads a SOL_XDP option into a kernel structure.
func xskGetsockopt(fd, opt int, val unsafe.Pointer, size uintptr) error {
	n := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(val), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return os.NewSyscallError("getsockopt", e)
	}
	return nil
}

// xskRegisterUMEM registers umem (page aligned, from mmap) with the socket
// (XDP_UMEM_REG), in aligned-chunk mode without headroom, with txMeta
// bytes of TX metadata in front of each TX frame's packet if not 0.
func xskRegisterUMEM(fd int, umem []byte, frameSize, txMeta int) error {
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&umem[0]))),
		Len:  uint64(len(umem)),
		Size: uint32(frameSize),
	}
	if txMeta > 0 {
		reg.Flags, reg.Tx_metadata_len = unix.XDP_UMEM_TX_METADATA_LEN, uint32(txMeta)
	}
	return xskSetsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg))
}

// xskSetRingSize sets the number of entries of one ring (XDP_*_RING).
func xskSetRingSize(fd, opt int, entries uint32) error {
	return xskSetsockopt(fd, opt, unsafe.Pointer(&entries), unsafe.Sizeof(entries))
}

// xskMmapOffsets reads where the rings' fields live in their mappings.
func xskMmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	err := xskGetsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	return off, err
}

// xskStatistics reads the kernel's counters of the socket (XDP_STATISTICS).
func xskStatistics(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	err := xskGetsockopt(fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}
