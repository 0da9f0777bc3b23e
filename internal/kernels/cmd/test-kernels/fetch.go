package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// image is a kernel ready to boot.
type image struct {
	name    string // in the matrix: "debian12", "host"
	release string // uname -r
	vmlinuz string
	modules string // its /lib/modules/RELEASE, or "" without modules
}

// debianMeta is the package that names Debian 12's current cloud kernel.
const debianMeta = "linux-image-cloud-amd64"

// fetchKernel returns the kernel name, fetched into cache if need be, or
// nil and why it is not available.
func fetchKernel(cache, name string) (*image, string, error) {
	switch name {
	case "debian12":
		return fetchDebian(cache)
	case "host":
		return hostKernel()
	}
	return nil, "", fmt.Errorf("unknown kernel %q (debian12, host)", name)
}

// fetchDebian downloads the kernel package the metapackage depends on
// (linux-image-6.1.0-N-cloud-amd64) with `apt-get download` and unpacks it
// with `dpkg-deb -x`, once per version.
func fetchDebian(cache string) (*image, string, error) {
	if runtime.GOARCH != "amd64" {
		return nil, "the matrix boots amd64 kernels only", nil
	}
	for _, tool := range []string{"apt-cache", "apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, tool + " not found (not a Debian system)", nil
		}
	}
	out, err := command("", "apt-cache", "depends", debianMeta)
	if err != nil {
		return nil, fmt.Sprintf("apt-cache depends %s: %v", debianMeta, err), nil
	}
	var pkg string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			pkg = f[1]
			break
		}
	}
	if pkg == "" {
		return nil, debianMeta + " depends on no linux-image package", nil
	}
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, "", err
	}
	deb := newest(filepath.Join(debs, pkg+"_*.deb"))
	if deb == "" {
		fmt.Fprintf(os.Stderr, "test-kernels: debian12: apt-get download %s\n", pkg)
		if _, err := command(debs, "apt-get", "download", "-q", pkg); err != nil {
			return nil, fmt.Sprintf("apt-get download %s: %v", pkg, err), nil
		}
		if deb = newest(filepath.Join(debs, pkg+"_*.deb")); deb == "" {
			return nil, "apt-get download left no " + pkg + " package", nil
		}
	}
	root := filepath.Join(cache, "debian12", strings.TrimSuffix(filepath.Base(deb), ".deb"))
	if _, err := os.Stat(filepath.Join(root, ".unpacked")); err != nil {
		os.RemoveAll(root)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, "", err
		}
		if _, err := command("", "dpkg-deb", "-x", deb, root); err != nil {
			return nil, "", fmt.Errorf("dpkg-deb -x %s: %w", deb, err)
		}
		if err := os.WriteFile(filepath.Join(root, ".unpacked"), nil, 0o644); err != nil {
			return nil, "", err
		}
	}
	vmlinuz := newest(filepath.Join(root, "boot", "vmlinuz-*"))
	if vmlinuz == "" {
		return nil, "", fmt.Errorf("%s has no boot/vmlinuz-*", deb)
	}
	release := strings.TrimPrefix(filepath.Base(vmlinuz), "vmlinuz-")
	img := &image{name: "debian12", release: release, vmlinuz: vmlinuz, modules: filepath.Join(root, "lib", "modules", release)}
	return img, "", nil
}

// hostKernel finds an image of the running kernel where distributions put
// it.
func hostKernel() (*image, string, error) {
	out, err := command("", "uname", "-r")
	if err != nil {
		return nil, "uname -r: " + err.Error(), nil
	}
	release := strings.TrimSpace(out)
	places := []string{
		"/boot/vmlinuz-" + release,
		"/lib/modules/" + release + "/vmlinuz",
		"/usr/lib/modules/" + release + "/vmlinuz",
	}
	for _, p := range places {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			img := &image{name: "host", release: release, vmlinuz: p}
			if _, err := os.Stat("/lib/modules/" + release + "/modules.dep"); err == nil {
				img.modules = "/lib/modules/" + release
			}
			return img, "", nil
		}
	}
	return nil, fmt.Sprintf("no image of the running kernel %s (looked for %s)", release, strings.Join(places, ", ")), nil
}

// newest is the last of the files matching pattern in lexical order (the
// newest of one package's versions as apt names them), or "".
func newest(pattern string) string {
	m, _ := filepath.Glob(pattern)
	if len(m) == 0 {
		return ""
	}
	sort.Strings(m)
	return m[len(m)-1]
}

// command runs name in dir and returns its standard output; the error
// carries its standard error.
func command(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", fmt.Errorf("%w: %s", err, msg)
		}
		return "", err
	}
	return string(out), nil
}
