package main

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gsoplane/gsoplane/internal/testing/kernels"
)

// binary is a binary built on the host for the guest.
type binary struct {
	name   string // the package, or "bench"
	host   string // its path here
	guest  string // its path in the guest
	dir    string // the package's directory in the guest (a test's working directory; where a command is built)
	src    string // the package's directory here
	goTest bool
}

// binaries is everything built for the guests.
type binaries struct {
	root     string // the module's directory: what tests read beside their packages (contrib, docs)
	kinit    string
	steps    []binary // run in this order
	extra    []binary // packed, not run: the commands the tests build (testBuilds)
	prebuilt map[string]string
}

// build builds the init, the test binaries of o.packages, the bench and
// udpfwd, statically (CGO_ENABLED=0), into the cache.
func build(o *options) (*binaries, error) {
	gomod, err := command("", "go", "env", "GOMOD")
	if err != nil {
		return nil, err
	}
	gomod = strings.TrimSpace(gomod)
	if gomod == "" || gomod == os.DevNull {
		return nil, fmt.Errorf("run from the gsoplane module (go env GOMOD is empty)")
	}
	root := filepath.Dir(gomod)
	out := filepath.Join(o.cache, "build", "bin")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	b := &binaries{root: root, kinit: filepath.Join(out, "kinit"), prebuilt: map[string]string{}}
	if err := goBuild(root, "build", b.kinit, "./internal/testing/kernels/cmd/kinit"); err != nil {
		return nil, err
	}
	for _, p := range o.packages {
		file := strings.ReplaceAll(p, "/", "_") + ".test"
		bin := binary{name: p, host: filepath.Join(out, file), guest: "/tests/" + file,
			dir: "/src/" + p, src: filepath.Join(root, filepath.FromSlash(p)), goTest: true}
		if err := goBuild(root, "test", bin.host, "./"+p); err != nil {
			return nil, err
		}
		b.steps = append(b.steps, bin)
		if cmd, ok := testBuilds[p]; ok {
			c := binary{name: path.Base(cmd), host: filepath.Join(out, path.Base(cmd)), guest: "/tests/" + path.Base(cmd), dir: "/src/" + cmd}
			if err := goBuild(root, "build", c.host, "./"+cmd); err != nil {
				return nil, err
			}
			b.extra = append(b.extra, c)
			b.prebuilt["build "+c.dir] = c.guest
		}
		if p == "internal/privs" { // its privilege tests build their own test binary
			b.prebuilt["test "+bin.dir] = bin.guest
		}
	}
	if o.bench != "" {
		bin := binary{name: "bench", host: filepath.Join(out, "bench"), guest: "/tests/bench", dir: "/src/bench"}
		if err := goBuild(root, "build", bin.host, "./bench"); err != nil {
			return nil, err
		}
		b.steps = append(b.steps, bin)
	}
	return b, nil
}

// testBuilds are the commands a package's tests build (`go build -o OUT .`
// in the command's directory), by package: the host builds them, and the
// guest's go copies them.
var testBuilds = map[string]string{
	"cmd/udpfwd":                   "cmd/udpfwd",
	"dataplane/wireguard/wgtunnel": "cmd/wggso",
}

// goBuild runs `go build` or `go test -c` without cgo, stripped of the
// symbol table (the stack traces keep their names).
func goBuild(root, kind, out, pkg string) error {
	args := []string{kind}
	if kind == "test" {
		args = append(args, "-c")
	}
	args = append(args, "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	t := time.Now()
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	fmt.Fprintf(os.Stderr, "test-kernels: go %s %s (%s)\n", kind, pkg, time.Since(t).Round(100*time.Millisecond))
	return nil
}

// modulesToLoad are loaded at boot besides the devices' modules: what a
// stock system loads when the tests first use it (the guest's init also
// answers the kernel's requests for modules, as modprobe).
var modulesToLoad = []string{
	"tun", "veth", "sch_ingress", "cls_bpf", "act_bpf", "nfnetlink", "xfrm_user",
	"virtio_pci", "virtio_net",
}

// moduleDirs are the parts of /lib/modules/RELEASE/kernel packed into the
// initramfs, with everything they depend on.
var moduleDirs = []string{
	"kernel/net", "kernel/drivers/net", "kernel/drivers/virtio", "kernel/lib",
	"kernel/crypto", "kernel/arch",
}

// plan is what the guest of img runs.
func (b *binaries) plan(o *options, img *image) *kernels.Plan {
	p := &kernels.Plan{Kernel: img.name, Release: img.release, Smoke: o.smoke, Prebuilt: b.prebuilt}
	if img.modules != "" {
		p.Modules = modulesToLoad
	}
	for _, bin := range b.steps {
		s := kernels.Step{Name: bin.name, Binary: bin.guest, Dir: bin.dir, GoTest: bin.goTest,
			Timeout: o.timeout + 30*time.Second}
		if bin.goTest {
			s.Args = []string{"-test.v", "-test.count=1", "-test.timeout=" + o.timeout.String()}
			if o.run != "" {
				s.Args = append(s.Args, "-test.run="+o.run)
			}
			if o.skip != "" {
				s.Args = append(s.Args, "-test.skip="+o.skip)
			}
			if o.short {
				s.Args = append(s.Args, "-test.short")
			}
		} else {
			s.Args = []string{"-scenario", o.bench, "-duration", "1s", "-runs", "1"}
			if o.smoke {
				// The bench again, on the guest's two virtio-net NICs
				// (kinit names them in netlab.NICsEnv).
				nics := s
				nics.Name, nics.Args = bin.name+"-virtio-net", append(slices.Clip(s.Args), "-link", "nics")
				p.Steps = append(p.Steps, s, nics)
				continue
			}
		}
		p.Steps = append(p.Steps, s)
	}
	return p
}
