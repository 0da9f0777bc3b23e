package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/ethtool"
	"github.com/gsoplane/gsoplane/internal/testing/kernels"
	"github.com/gsoplane/gsoplane/internal/testing/netlab"
)

// smokeEtherType is the local experimental EtherType (IEEE 802) of the
// smoke check's frame.
const smokeEtherType = 0x88b5

// smoke lists the NICs with their drivers, sends a frame from the first
// virtio-net NIC to the second (QEMU joins them) and tries a native XDP
// program on each virtio-net NIC; it prints one line, and returns the two
// NICs as netlab.NICsEnv names them when the frame crossed, else "".
func smoke() (nics string) {
	var s kernels.Smoke
	var virtio []string
	devs, _ := filepath.Glob("/sys/class/net/*/device/driver")
	for _, d := range devs {
		target, err := os.Readlink(d)
		if err != nil {
			continue
		}
		name := filepath.Base(filepath.Dir(filepath.Dir(d)))
		nic := kernels.NIC{Name: name, Driver: filepath.Base(target)}
		if nic.Driver == "virtio_net" {
			virtio = append(virtio, name)
		}
		s.NICs = append(s.NICs, nic)
	}
	for _, name := range virtio {
		if err := linkUp(name); err != nil {
			fmt.Printf("kinit: smoke: %s up: %v\n", name, err)
		}
	}
	if len(virtio) >= 2 {
		if s.Frame = crossFrame(virtio[0], virtio[1]); strings.HasSuffix(s.Frame, ": received") {
			nics = virtio[0] + "," + virtio[1]
		}
	} else {
		s.Frame = fmt.Sprintf("not tried: %d virtio-net NICs", len(virtio))
	}
	for i := range s.NICs {
		if s.NICs[i].Driver == "virtio_net" {
			s.NICs[i].Offloads = offloads(s.NICs[i].Name)
			s.NICs[i].XDP = attachXDP(s.NICs[i].Name)
		}
	}
	for _, p := range netlab.Probes {
		f := kernels.Feature{Name: p.Name, Since: p.Since}
		if err := p.Detect(); err == nil {
			f.Present = true
		} else {
			f.Error = err.Error()
		}
		s.Features = append(s.Features, f)
	}
	fmt.Println(s.Line())
	return nics
}

// offloadNames are the features offloads reports.
var offloadNames = []string{"tx-checksum-ip-generic", "tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-udp-segmentation", "rx-gro-hw", "rx-checksum"}

// offloads lists the offloads of offloadNames that are on for the NIC.
func offloads(name string) string {
	f, err := ethtool.Features(name)
	if err != nil {
		return "error: " + err.Error()
	}
	var on []string
	for _, n := range offloadNames {
		if f[n].Active {
			on = append(on, n)
		}
	}
	if len(on) == 0 {
		return "none"
	}
	return strings.Join(on, " ")
}

// crossFrame sends a broadcast frame on from and waits for it on to.
func crossFrame(from, to string) string {
	fi, err1 := net.InterfaceByName(from)
	ti, err2 := net.InterfaceByName(to)
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("error: %v %v", err1, err2)
	}
	waitFor(context.Background(), 5*time.Second, func() bool {
		b, _ := os.ReadFile("/sys/class/net/" + to + "/operstate")
		return strings.TrimSpace(string(b)) == "up"
	})
	proto := int(htons(smokeEtherType))
	rx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return "error: " + err.Error()
	}
	defer unix.Close(rx)
	if err := unix.Bind(rx, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ti.Index}); err != nil {
		return "error: bind " + to + ": " + err.Error()
	}
	tv := unix.NsecToTimeval(int64(time.Second))
	unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	tx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "error: " + err.Error()
	}
	defer unix.Close(tx)
	payload := []byte("gsoplane kernels smoke " + from + " to " + to)
	frame := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, fi.HardwareAddr...)
	frame = append(frame, smokeEtherType>>8, smokeEtherType&0xff)
	frame = append(frame, payload...)
	dst := &unix.SockaddrLinklayer{Ifindex: fi.Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	buf := make([]byte, 2048)
	for try := 0; try < 3; try++ {
		if err := unix.Sendto(tx, frame, 0, dst); err != nil {
			return "error: send on " + from + ": " + err.Error()
		}
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			n, _, err := unix.Recvfrom(rx, buf, 0)
			if err != nil {
				break
			}
			if bytes.Contains(buf[:n], payload) {
				return fmt.Sprintf("%s → %s: received", from, to)
			}
		}
	}
	return fmt.Sprintf("%s → %s: not received", from, to)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// attachXDP attaches a program that passes every packet to name in native
// (driver) mode and detaches it: "native", or why it did not attach.
func attachXDP(name string) string {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return "error: " + err.Error()
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.XDP,
		License: "Apache-2.0",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
		},
	})
	if err != nil {
		return "error: load: " + err.Error()
	}
	defer prog.Close()
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifi.Index, Flags: link.XDPDriverMode})
	if err != nil {
		return "error: " + err.Error()
	}
	l.Close()
	return "native"
}
