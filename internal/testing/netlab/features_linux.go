// Kernel features the tests need and older kernels lack, each probed once
// by asking the kernel for it (never by its version). A probe returns nil
// where the kernel has the feature, else an error naming the feature and
// the first Linux release that has it: the reason a test skips with.

package netlab

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// ErrMissingFeature is what the probes' errors wrap.
var ErrMissingFeature = errors.New("kernel feature missing")

// SkipWithout skips t unless root (the probes need root) or if probe
// reports the feature missing, and fails it if the probe itself failed.
func SkipWithout(t TB, probe func() error) {
	t.Helper()
	RequireRoot(t)
	if err := Lacks(t, probe); err != nil {
		t.Skip(err)
	}
}

// Lacks returns probe's error if it reports the feature missing, nil if
// the kernel has it; it fails t if the probe itself failed. It needs root.
func Lacks(t TB, probe func() error) error {
	t.Helper()
	err := probe()
	if err != nil && !errors.Is(err, ErrMissingFeature) {
		t.Fatal(err)
	}
	return err
}

// Probe is a kernel feature the tests and the ports look for.
type Probe struct {
	Name   string       // what it is
	Since  string       // the first Linux release that has it ("6.6")
	Row    string       // the start of its row in the README's requirements table
	Detect func() error // nil if the kernel has it; ErrMissingFeature if not
}

// The features probed.
var (
	probeAFXDPMultiBuffer = Probe{Name: "AF_XDP multi-buffer (XDP_USE_SG)", Since: "6.6", Row: "AF_XDP multi-buffer receive"}
	probeVirtioNetUSO     = Probe{Name: "UDP segmentation offload in the virtio-net header (TUN_F_USO4/6, VIRTIO_NET_HDR_GSO_UDP_L4)", Since: "6.2", Row: "TUN super-packets: UDP (USO)"}
	probeTCX              = Probe{Name: "tcx", Since: "6.6", Row: "AF_PACKET ingress filter through tcx"}
	probeAFXDPTXMetadata  = Probe{Name: "AF_XDP TX metadata (XDP_UMEM_TX_METADATA_LEN)", Since: "6.11", Row: "AF_XDP TX checksum offload"}
	probeVirtioNetTunnel  = Probe{Name: "UDP-tunnel GSO in the virtio-net header (TUN_F_UDP_TUNNEL_GSO, VIRTIO_NET_HDR_GSO_UDP_TUNNEL_IPV4/6)", Since: "6.17", Row: "TUN super-packets: UDP tunnels"}
)

// Probes are the features probed, each with its detector, for the kernel
// matrix's report.
var Probes = []Probe{
	withDetect(probeAFXDPMultiBuffer, AFXDPMultiBuffer),
	withDetect(probeVirtioNetUSO, VirtioNetUSO),
	withDetect(probeTCX, TCX),
	withDetect(probeAFXDPTXMetadata, AFXDPTXMetadata),
	withDetect(probeVirtioNetTunnel, VirtioNetTunnel),
}

func withDetect(p Probe, detect func() error) Probe {
	p.Detect = detect
	return p
}

// missing is the error of a probe that did not find its feature.
func missing(p Probe) error {
	return fmt.Errorf("%w: %s needs Linux %s", ErrMissingFeature, p.Name, p.Since)
}

// AFXDPMultiBuffer reports whether AF_XDP sockets bind with XDP_USE_SG
// (multi-buffer, Linux 6.6). Before, bind refuses the flag (EINVAL)
// before it looks at the device; since, binding to ifindex 0 fails with
// ENODEV.
var AFXDPMultiBuffer = sync.OnceValue(func() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("probe AF_XDP multi-buffer: %w", os.NewSyscallError("socket AF_XDP", err))
	}
	defer unix.Close(fd)
	err = unix.Bind(fd, &unix.SockaddrXDP{Flags: unix.XDP_USE_SG | unix.XDP_COPY})
	switch {
	case errors.Is(err, unix.EINVAL):
		return missing(probeAFXDPMultiBuffer)
	case errors.Is(err, unix.ENODEV):
		return nil
	}
	return fmt.Errorf("probe AF_XDP multi-buffer: bind with XDP_USE_SG to no device: %v, want ENODEV or EINVAL", err)
})

// TUN offload flags of USO (Linux 6.2) and UDP-tunnel GSO (Linux 6.17),
// include/uapi/linux/if_tun.h.
const (
	tunFUSO4          = 0x20
	tunFUSO6          = 0x40
	tunFUDPTunnel     = 0x80
	tunFUDPTunnelCsum = 0x100
)

// AFXDPTXMetadata reports whether an AF_XDP UMEM registers with room for
// TX metadata (XDP_UMEM_TX_METADATA_LEN, Linux 6.11; checksum offload
// on transmit). Before, the kernel refuses the flag (EINVAL).
var AFXDPTXMetadata = sync.OnceValue(func() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("probe AF_XDP TX metadata: %w", os.NewSyscallError("socket AF_XDP", err))
	}
	defer unix.Close(fd)
	const size = 2 * 4096
	umem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("probe AF_XDP TX metadata: %w", os.NewSyscallError("mmap", err))
	}
	defer unix.Munmap(umem)
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&umem[0]))), Len: size, Size: 4096,
		Flags: unix.XDP_UMEM_TX_METADATA_LEN, Tx_metadata_len: 24}
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG, uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0)
	switch e {
	case 0:
		return nil
	case unix.EINVAL:
		return missing(probeAFXDPTXMetadata)
	}
	return fmt.Errorf("probe AF_XDP TX metadata: %w", os.NewSyscallError("setsockopt XDP_UMEM_REG", e))
})

// VirtioNetUSO reports whether the kernel takes UDP segmentation offload
// in the virtio-net header (VIRTIO_NET_HDR_GSO_UDP_L4, Linux 6.2): a TUN
// accepts TUN_F_USO4 and TUN_F_USO6, and writes USO super-packets to it
// and AF_PACKET sockets with PACKET_VNET_HDR read UDP GRO super-packets
// (the same kernel change). Before, TUNSETOFFLOAD refuses the flags
// (EINVAL).
var VirtioNetUSO = sync.OnceValue(func() error {
	return probeTUNOffload(probeVirtioNetUSO, unix.TUN_F_CSUM|tunFUSO4|tunFUSO6)
})

// VirtioNetTunnel reports whether the kernel takes UDP-tunnel GSO in the
// virtio-net header (Linux 6.17): a TUN accepts TUN_F_UDP_TUNNEL_GSO and
// TUN_F_UDP_TUNNEL_GSO_CSUM (with TSO, which they need), and a 24-byte
// header carries the tunnel offsets. Before, TUNSETOFFLOAD refuses the
// flags (EINVAL).
var VirtioNetTunnel = sync.OnceValue(func() error {
	return probeTUNOffload(probeVirtioNetTunnel, unix.TUN_F_CSUM|unix.TUN_F_TSO4|unix.TUN_F_TSO6|tunFUDPTunnel|tunFUDPTunnelCsum)
})

// probeTUNOffload asks a TUN device for the offload flags p needs. The
// TUN lives in a network namespace of its own, which goes with the
// probe's thread.
func probeTUNOffload(p Probe, flags int) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, in its own namespace, ends with
		// this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("probe %s: %w", p.Name, os.NewSyscallError("unshare CLONE_NEWNET", err))
			return
		}
		errc <- setTUNOffload(p, flags)
	}()
	return <-errc
}

func setTUNOffload(p Probe, flags int) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("probe %s: %w", p.Name, os.NewSyscallError("open /dev/net/tun", err))
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("probe %s: %w", p.Name, os.NewSyscallError("ioctl TUNSETIFF", err))
	}
	err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, flags)
	switch {
	case errors.Is(err, unix.EINVAL):
		return missing(p)
	case err != nil:
		return fmt.Errorf("probe %s: %w", p.Name, os.NewSyscallError("ioctl TUNSETOFFLOAD", err))
	}
	return nil
}

// TCX reports whether the kernel has tcx, the BPF link based TC hooks
// (Linux 6.6): a BPF_PROG_QUERY of lo's tcx ingress answers (with no
// programs); before, the kernel does not know the attach type (EINVAL).
var TCX = sync.OnceValue(func() error {
	_, err := link.QueryPrograms(link.QueryOptions{Target: 1, Attach: ebpf.AttachTCXIngress})
	switch {
	case errors.Is(err, unix.EINVAL):
		return missing(probeTCX)
	case err != nil:
		return fmt.Errorf("probe tcx: query lo's tcx ingress: %w", err)
	}
	return nil
})
