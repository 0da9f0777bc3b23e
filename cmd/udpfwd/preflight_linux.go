package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/dataplane"
	"github.com/gsoplane/gsoplane/internal/privs"
)

// tunClonePath is the TUN clone device.
const tunClonePath = "/dev/net/tun"

// preflight checks the system before anything is changed: capabilities,
// the user to switch to, the NIC, the TUN device and kernel features.
// It returns the account of -user (nil without it) or one error listing
// every problem.
func preflight(cfg *config) (*privs.Account, error) {
	p := checkCaps(cfg)
	var acct *privs.Account
	if cfg.User != "" {
		var err error
		if acct, err = lookupAccount(cfg.User); err != nil {
			p.add("%v", err)
		}
	}
	if cfg.Port.value == "xdp" {
		p.merge(checkMemlock(cfg))
		p.merge(checkAFXDP())
	}
	p.merge(checkDevice(cfg, "-nic", cfg.NIC))
	p.merge(checkNIC(cfg))
	if cfg.Ingress != "" {
		p.merge(checkDevice(cfg, "-ingress", cfg.Ingress))
	} else {
		p.merge(checkTUN(cfg))
	}
	return acct, p.err("cannot start")
}

// checkMemlock checks, without CAP_IPC_LOCK, that RLIMIT_MEMLOCK holds a
// UMEM per queue, raising the soft limit to the hard one first. (Every
// RX queue of the NIC gets a socket: at least -queues of them.)
func checkMemlock(cfg *config) problems {
	eff, err := privs.Effective()
	var lim unix.Rlimit
	if err != nil || eff&(1<<unix.CAP_IPC_LOCK) != 0 || unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) != nil {
		return nil
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim)
	}
	umem := uint64(dataplane.UMEMFrames(int(cfg.Budget.bytes)) * dataplane.UMEMFrameSize)
	if lim.Cur == unix.RLIM_INFINITY || lim.Cur >= uint64(max(cfg.Queues, 1))*umem {
		return nil
	}
	return problems{fmt.Sprintf("RLIMIT_MEMLOCK is %d KiB, the AF_XDP sockets lock %d KiB per NIC RX queue: grant CAP_IPC_LOCK, or raise the limit (ulimit -l, LimitMEMLOCK=infinity in systemd)",
		lim.Cur>>10, umem>>10)}
}

// checkDevice checks that the device a port opens on (flag's) exists
// here, is Ethernet and, for AF_XDP, has no XDP program.
func checkDevice(cfg *config, flag, name string) problems {
	var p problems
	link, err := netlink.LinkByName(name)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		p.add("%s %q: no such interface in this network namespace (see ip link show)", flag, name)
		return p
	} else if err != nil {
		p.add("%s %q: %v", flag, name, err)
		return p
	}
	a := link.Attrs()
	if len(a.HardwareAddr) != 6 {
		p.add("%s %q: not an Ethernet device (%s)", flag, name, link.Type())
	}
	if a.Xdp != nil && a.Xdp.Attached && cfg.Port.value != "packet" {
		p.add("%s %q: an XDP program (ID %d) is already attached; if a BPF link holds it (another gateway), stop that process or detach it (bpftool link show; bpftool link detach id N), else ip link set dev %s xdp off; or use -port packet",
			flag, name, a.Xdp.ProgId, name)
	}
	return p
}

// checkNIC checks that the NIC has enough queues and a large enough MTU.
func checkNIC(cfg *config) problems {
	var p problems
	link, err := netlink.LinkByName(cfg.NIC)
	if err != nil {
		return p // checkDevice said why
	}
	a := link.Attrs()
	if a.NumRxQueues > 0 && cfg.Queues > a.NumRxQueues {
		p.add("-queues %d: %s has %d RX queues", cfg.Queues, cfg.NIC, a.NumRxQueues)
	}
	if cfg.MTU > a.MTU {
		p.add("-mtu %d: larger than the MTU of %s (%d); its segments would not fit the NIC", cfg.MTU, cfg.NIC, a.MTU)
	}
	return p
}

// checkTUN checks that TUN devices can be created and that an existing
// device of that name is a TUN device.
func checkTUN(cfg *config) problems {
	var p problems
	// Opening the clone device creates nothing until TUNSETIFF.
	switch f, err := os.OpenFile(tunClonePath, os.O_RDWR, 0); {
	case err == nil:
		f.Close()
	case errors.Is(err, os.ErrNotExist):
		p.add("%v (is the tun module loaded? modprobe tun)", err)
	case errors.Is(err, os.ErrPermission):
		p.add("%v (it is usually mode 0666; or run as root)", err)
	default:
		p.add("%v", err)
	}
	link, err := netlink.LinkByName(cfg.TUN)
	if err != nil {
		return p // missing: it will be created
	}
	if t, ok := link.(*netlink.Tuntap); !ok || t.Mode != netlink.TUNTAP_MODE_TUN {
		p.add("-tun %q: exists and is not a TUN device (%s)", cfg.TUN, link.Type())
	} else if mq := t.Flags&netlink.TUNTAP_MULTI_QUEUE != 0; mq != (cfg.Queues > 1) {
		p.add("-tun %q: the existing device is %s, -queues %d needs %s (or delete it: ip link del %s)",
			cfg.TUN, queueMode(mq), cfg.Queues, queueMode(cfg.Queues > 1), cfg.TUN)
	}
	return p
}

func queueMode(multi bool) string {
	if multi {
		return "multi-queue"
	}
	return "single-queue"
}

// checkAFXDP checks that the kernel has AF_XDP sockets. (Without
// CAP_NET_RAW the probe fails with EPERM, which checkCaps reports.)
func checkAFXDP() problems {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if errors.Is(err, unix.EAFNOSUPPORT) {
		return problems{"the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)"}
	}
	return nil
}
