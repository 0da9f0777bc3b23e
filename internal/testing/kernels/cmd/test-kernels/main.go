// Command test-kernels runs the project's privileged tests and the bench
// in QEMU guests, one per kernel of the matrix, and reports per kernel and
// per package what passed, failed and skipped (`make test-kernels`).
//
//	go run ./internal/testing/kernels/cmd/test-kernels                 # every kernel, every package
//	go run ./internal/testing/kernels/cmd/test-kernels -packages segment,dataplane/xsk -run 'XDP'
//	go run ./internal/testing/kernels/cmd/test-kernels -short -packages dataplane/xsk,dataplane/afpacket,dataplane/tun,dataplane/udp,segment
//
// The kernels: Debian's cloud kernels (linux-image-cloud-amd64) of
// debian12 (bookworm, Linux 6.1), debian13 (trixie, Linux 6.12) and
// debian13-backports (trixie-backports, the newest kernel Debian packages),
// fetched from deb.debian.org with `apt-get download` through an apt
// configuration of the cache's own and unpacked with `dpkg-deb -x` into the
// cache directory; and host, the running kernel, when an image of it is
// found (/boot/vmlinuz-RELEASE or /lib/modules/RELEASE/vmlinuz). The test binaries, the bench, udpfwd and
// the guest's init (internal/testing/kernels/cmd/kinit) are built without cgo,
// packed with the kernel's network, virtio, crypto and library modules into
// a gzip'd newc initramfs, and booted with qemu-system-x86_64: with KVM when
// /dev/kvm exists, else under emulation (TCG, slow). The guest has two
// virtio-net NICs on one QEMU hub, and a smoke check reports their driver,
// whether native XDP attaches and whether a frame crosses from one to the
// other.
//
// The report (a table of kernel × package, then the failed tests with
// their last lines and the skipped tests with their reasons) goes to
// stdout and to kernels.txt and kernels.json in the cache directory
// ($XDG_CACHE_HOME/gsoplane-kernels, else ~/.cache/gsoplane-kernels), with
// each guest's console log beside them.
//
// Without QEMU, or without any kernel, it says so in one line and exits 0,
// unless -require is given. It exits 1 when a test failed, a binary timed
// out, a guest did not finish, or a kernel feature the tests probe for
// (netlab.Probes) is present where the README's requirements table says it
// is not, or absent where it says it is.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/kernels"
)

// packages are the test binaries of the matrix: the privileged tests.
var packages = []string{
	"dataplane/xsk",
	"dataplane/afpacket",
	"dataplane/tun",
	"dataplane/udp",
	"dataplane",
	"cmd/udpfwd",
	"internal/privs",
	"segment",
	"dataplane/wireguard/wgtunnel",
}

type options struct {
	kernels  []string
	packages []string
	run      string
	skip     string
	short    bool
	bench    string // the bench's scenarios; empty: no bench
	smoke    bool
	timeout  time.Duration
	total    time.Duration
	cache    string
	memory   string
	nicProps string // extra virtio-net-pci properties
	cpus     int
	require  bool
	verbose  bool
}

func main() {
	var o options
	var kernelList, pkgList string
	flag.StringVar(&kernelList, "kernels", strings.Join(kernelNames, ","), "the kernels to run, comma-separated: "+strings.Join(kernelNames, ", "))
	flag.StringVar(&pkgList, "packages", strings.Join(packages, ","), "the packages whose tests run, comma-separated; empty for none")
	flag.StringVar(&o.run, "run", "", "run only the tests matching this regular expression (-test.run)")
	flag.StringVar(&o.skip, "skip", "", "skip the tests matching this regular expression (-test.skip)")
	flag.BoolVar(&o.short, "short", false, "run the tests with -test.short")
	flag.StringVar(&o.bench, "bench", "gso", "run `bench -scenario SCENARIOS -duration 1s -runs 1` after the tests (comma-separated, as the bench takes them); empty: no bench")
	flag.BoolVar(&o.smoke, "smoke", true, "check the guest's virtio-net NICs before the tests")
	flag.DurationVar(&o.timeout, "timeout", 0, "the deadline of each test binary in the guest; 0: 15m, or 30m under emulation (TCG), where dataplane's tests take 6 minutes quiet and more than 15 loaded")
	flag.DurationVar(&o.total, "total", 3*time.Hour, "the deadline of each guest")
	flag.StringVar(&o.cache, "cache", defaultCache(), "the directory of the kernels, the builds, the logs and the report")
	flag.StringVar(&o.memory, "m", "2G", "the guest's memory (QEMU -m)")
	flag.StringVar(&o.nicProps, "nic-props", "", "extra properties of the guest's virtio-net-pci NICs, comma-separated (e.g. ctrl_guest_offloads=off: the NIC cannot turn its receive offloads off for XDP)")
	flag.IntVar(&o.cpus, "smp", 2, "the guest's CPUs (QEMU -smp)")
	flag.BoolVar(&o.require, "require", false, "fail instead of skipping when QEMU or a kernel is missing")
	flag.BoolVar(&o.verbose, "v", false, "copy the guests' consoles to stderr")
	flag.Parse()
	o.kernels = split(kernelList)
	o.packages = split(pkgList)
	for flagName, re := range map[string]string{"-run": o.run, "-skip": o.skip} {
		if _, err := regexp.Compile(re); err != nil {
			fatal(fmt.Errorf("%s: %w", flagName, err))
		}
	}
	for _, p := range o.packages {
		if !contains(packages, p) {
			fatal(fmt.Errorf("-packages: %s is not one of %s", p, strings.Join(packages, ", ")))
		}
	}
	code, err := run(&o)
	if err != nil {
		fatal(err)
	}
	os.Exit(code)
}

func run(o *options) (int, error) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return skip(o, "qemu-system-x86_64 not found (apt-get install qemu-system-x86): kernel matrix skipped")
	}
	accel := "tcg"
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
		f.Close()
		accel = "kvm"
	} else {
		fmt.Fprintln(os.Stderr, "test-kernels: no /dev/kvm: the guests run under emulation (TCG), which is slow")
	}
	if o.timeout == 0 {
		o.timeout = 15 * time.Minute
		if accel == "tcg" {
			o.timeout = 30 * time.Minute
		}
	}
	if err := os.MkdirAll(o.cache, 0o755); err != nil {
		return 0, err
	}

	rep := &kernels.Report{}
	var images []*image
	for _, name := range o.kernels {
		img, why, err := fetchKernel(o.cache, name)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if img == nil {
			fmt.Fprintf(os.Stderr, "test-kernels: %s: %s: skipped\n", name, why)
			rep.Kernels = append(rep.Kernels, kernels.Kernel{Name: name, Skipped: why})
			continue
		}
		images = append(images, img)
	}
	if len(images) == 0 {
		if o.require {
			return 0, errors.New("no kernel to run")
		}
		fmt.Fprintln(os.Stderr, "test-kernels: no kernel to run: kernel matrix skipped")
		return 0, nil
	}

	start := time.Now()
	bins, err := build(o)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(os.Stderr, "test-kernels: built %d binaries in %s\n", len(bins.steps), time.Since(start).Round(time.Second))

	for _, img := range images {
		initrd := filepath.Join(o.cache, "build", "initramfs-"+img.name+".cpio.gz")
		plan := bins.plan(o, img)
		t := time.Now()
		if err := pack(initrd, img, bins, plan); err != nil {
			return 0, fmt.Errorf("%s: initramfs: %w", img.name, err)
		}
		fmt.Fprintf(os.Stderr, "test-kernels: %s: initramfs %s (%s, packed in %s)\n", img.name, initrd, size(initrd), time.Since(t).Round(time.Second))
		k := boot(o, qemu, accel, img, initrd, plan)
		rep.Kernels = append(rep.Kernels, k)
	}

	var text strings.Builder
	rep.Write(&text)
	fmt.Print("\n" + text.String())
	txt := filepath.Join(o.cache, "kernels.txt")
	if err := os.WriteFile(txt, []byte(text.String()), 0o644); err != nil {
		return 0, err
	}
	js, _ := json.MarshalIndent(rep, "", "\t")
	if err := os.WriteFile(filepath.Join(o.cache, "kernels.json"), js, 0o644); err != nil {
		return 0, err
	}
	fmt.Fprintf(os.Stderr, "test-kernels: report in %s and kernels.json beside it\n", txt)
	return exitCode(rep), nil
}

// exitCode is 1 when a guest did not finish, a step did not end well or
// a probed feature disagrees with the README.
func exitCode(rep *kernels.Report) int {
	if rep.Disagreements() > 0 {
		return 1
	}
	for _, k := range rep.Kernels {
		if k.Guest != "" {
			return 1
		}
		for _, r := range k.Results {
			if r.Status != kernels.StatusOK {
				return 1
			}
		}
	}
	return 0
}

func skip(o *options, why string) (int, error) {
	if o.require {
		return 0, errors.New(why)
	}
	fmt.Fprintln(os.Stderr, "test-kernels: "+why)
	return 0, nil
}

func defaultCache() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "gsoplane-kernels")
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".cache", "gsoplane-kernels")
	}
	return "/var/cache/gsoplane-kernels"
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func size(name string) string {
	st, err := os.Stat(name)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.1f MiB", float64(st.Size())/(1<<20))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "test-kernels:", err)
	os.Exit(2)
}
