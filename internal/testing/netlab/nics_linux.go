package netlab

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NICsEnv names the environment variable that names two real network
// devices joined by a wire ("eth0,eth1"): the kernel matrix's guest sets
// it to its two virtio-net NICs, on one bridge of the host's.
const NICsEnv = "GSOPLANE_NICS"

// EnvNICs returns the two devices NICsEnv names, or why there are none.
func EnvNICs() (a, b string, err error) {
	v := os.Getenv(NICsEnv)
	a, b, ok := strings.Cut(v, ",")
	if !ok || a == "" || b == "" || a == b {
		return "", "", fmt.Errorf("%w: no pair of real NICs: %s=%q, want two devices joined by a wire (make test-kernels sets it in its guests)", ErrMissingFeature, NICsEnv, v)
	}
	return a, b, nil
}

// nicsInUse is held while a topology has the devices: they can be in one
// topology at a time.
var nicsInUse sync.Mutex

// NewTopologyOnNICs builds the reference topology on two real devices of
// the process's original namespace that a wire joins, in place of the veth
// pair: nicA goes into A as NICA, nicB into B as NICB, each down while it
// moves. Close brings them back under their own names. One topology at a
// time has them: a second call waits for the first's Close.
func NewTopologyOnNICs(tag, nicA, nicB string) (*Topology, error) {
	nicsInUse.Lock()
	tp, err := newTopology(tag, func(tp *Topology) error {
		tp.release = func() error {
			return errors.Join(returnNIC(tp.A, NICA, nicA), returnNIC(tp.B, NICB, nicB))
		}
		return errors.Join(adoptNIC(nicA, tp.A, NICA), adoptNIC(nicB, tp.B, NICB))
	})
	if err != nil {
		nicsInUse.Unlock()
		return nil, err
	}
	release := tp.release
	tp.release = func() error {
		defer nicsInUse.Unlock()
		return release()
	}
	return tp, nil
}

// origin opens a netlink handle in the namespace the process started in,
// where the real devices live.
func origin() (*netlink.Handle, error) {
	h, err := originNS()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return netlink.NewHandleAt(h)
}

// originNS opens the namespace the process started in: every thread not
// locked into another one (nsrun puts threads back) is in it.
func originNS() (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := netns.Get()
	if err != nil {
		return h, fmt.Errorf("the original network namespace: %w", err)
	}
	return h, nil
}

// adoptNIC moves the device name of the original namespace into ns as
// newName and brings it up.
func adoptNIC(name string, ns *NS, newName string) error {
	nl, err := origin()
	if err != nil {
		return err
	}
	defer nl.Close()
	l, err := nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("NIC %s: %w", name, err)
	}
	for _, step := range []func() error{
		func() error { return nl.LinkSetDown(l) },
		func() error { return nl.LinkSetName(l, newName) },
		func() error { return nl.LinkSetNsFd(l, int(ns.h)) },
		func() error { return ns.LinkUp(newName) },
	} {
		if err := step(); err != nil {
			return fmt.Errorf("move NIC %s into %s as %s: %w", name, ns.Name, newName, err)
		}
	}
	return nil
}

// returnNIC moves the device name in ns back to the original namespace
// under its own name, origName, down; a device not in ns (it never got
// there) is left alone.
func returnNIC(ns *NS, name, origName string) error {
	if ns == nil {
		return nil
	}
	nl, err := origin()
	if err != nil {
		return err
	}
	defer nl.Close()
	l, err := ns.nl.LinkByName(name)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("NIC %s in %s: %w", name, ns.Name, err)
	}
	fd, err := originNS()
	if err != nil {
		return err
	}
	defer fd.Close()
	for _, step := range []func() error{
		func() error { return ns.nl.LinkSetDown(l) },
		func() error { return ns.nl.LinkSetName(l, origName) },
		func() error { return ns.nl.LinkSetNsFd(l, int(fd)) },
	} {
		if err := step(); err != nil {
			return fmt.Errorf("move NIC %s back from %s as %s: %w", name, ns.Name, origName, err)
		}
	}
	_, err = nl.LinkByName(origName)
	return err
}
