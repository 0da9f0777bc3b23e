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
	name    string // in the matrix: "debian12", "host", ...
	release string // uname -r
	vmlinuz string
	modules string // its /lib/modules/RELEASE, or "" without modules
}

// debianMeta is the metapackage that names a Debian release's current
// cloud kernel.
const debianMeta = "linux-image-cloud-amd64"

// debianMirror is where the Debian kernels come from.
const debianMirror = "http://deb.debian.org"

// debianKernels are the matrix's Debian kernels: the archive suites whose
// linux-image-cloud-amd64 each boots.
var debianKernels = map[string][]string{
	"debian12":           {"debian bookworm", "debian-security bookworm-security"}, // Debian 12: Linux 6.1
	"debian13":           {"debian trixie", "debian-security trixie-security"},     // Debian 13: Linux 6.12
	"debian13-backports": {"debian trixie-backports"},                              // the newest kernel Debian packages
}

// kernelNames are the kernels -kernels takes, in the matrix's order.
var kernelNames = []string{"debian12", "debian13", "debian13-backports", "host"}

// fetchKernel returns the kernel name, fetched into cache if need be, or
// nil and why it is not available.
func fetchKernel(cache, name string) (*image, string, error) {
	if name == "host" {
		return hostKernel()
	}
	if suites, ok := debianKernels[name]; ok {
		return fetchDebian(cache, name, suites)
	}
	return nil, "", fmt.Errorf("unknown kernel %q (%s)", name, strings.Join(kernelNames, ", "))
}

// fetchDebian downloads the kernel package the metapackage depends on in
// the suites (linux-image-VERSION-cloud-amd64, and the linux-base-,
// linux-binary- and linux-modules- packages newer kernels are split into) with
// `apt-get download`, through an apt configuration of its own in the cache
// (the machine's sources are left alone), and unpacks them with
// `dpkg-deb -x`, once per version. Offline, the newest kernel downloaded
// before is used.
func fetchDebian(cache, name string, suites []string) (*image, string, error) {
	if runtime.GOARCH != "amd64" {
		return nil, "the matrix boots amd64 kernels only", nil
	}
	for _, tool := range []string{"apt-cache", "apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, tool + " not found (not a Debian system)", nil
		}
	}
	dir := filepath.Join(cache, name)
	debs := filepath.Join(dir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, "", err
	}
	version, why, err := downloadDebian(dir, debs, suites)
	if err != nil {
		return nil, "", err
	}
	if version == "" {
		img := newest(filepath.Join(debs, "linux-image-*.deb"))
		if img == "" {
			return nil, why, nil
		}
		version = strings.Split(filepath.Base(img), "_")[1]
		fmt.Fprintf(os.Stderr, "test-kernels: %s: %s: using %s\n", name, why, filepath.Base(img))
	}
	files, _ := filepath.Glob(filepath.Join(debs, "*_"+version+"_amd64.deb"))
	return unpackDebian(filepath.Join(dir, version), name, files)
}

// downloadDebian finds the packages of the suites' cloud kernel and
// downloads those not in debs yet; it returns their version (as apt names
// files), or "" and why not.
func downloadDebian(dir, debs string, suites []string) (version, why string, err error) {
	apt, err := aptConfig(dir, suites)
	if err != nil {
		return "", "", err
	}
	if _, err := command("", "apt-get", append(apt, "update", "-q")...); err != nil {
		return "", fmt.Sprintf("apt-get update (%s): %v", strings.Join(suites, ", "), err), nil
	}
	meta, err := command("", "apt-cache", append(apt, "show", "--no-all-versions", debianMeta)...)
	if err != nil {
		return "", fmt.Sprintf("apt-cache show %s: %v", debianMeta, err), nil
	}
	image := dependency(meta, "linux-image-")
	if image == "" {
		return "", debianMeta + " depends on no linux-image package", nil
	}
	record, err := command("", "apt-cache", append(apt, "show", "--no-all-versions", image)...)
	if err != nil {
		return "", fmt.Sprintf("apt-cache show %s: %v", image, err), nil
	}
	v := field(record, "Version")
	pkgs := []string{image}
	for _, split := range []string{"linux-base-", "linux-binary-", "linux-modules-"} {
		if p := dependency(record, split); p != "" {
			pkgs = append(pkgs, p)
		}
	}
	// apt names a downloaded package NAME_VERSION_ARCH.deb, with the
	// version's colon (an epoch) as %3a.
	version = strings.ReplaceAll(v, ":", "%3a")
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(debs, p+"_"+version+"_amd64.deb")); err == nil {
			continue
		}
		fmt.Fprintf(os.Stderr, "test-kernels: apt-get download %s=%s\n", p, v)
		if _, err := command(debs, "apt-get", append(apt, "download", "-q", p+"="+v)...); err != nil {
			return "", fmt.Sprintf("apt-get download %s: %v", p, err), nil
		}
	}
	return version, "", nil
}

// dependency is the first package of an apt record's Depends whose name
// starts with prefix, or "".
func dependency(record, prefix string) string {
	for _, alt := range strings.Split(field(record, "Depends"), ",") {
		for _, p := range strings.Split(alt, "|") {
			if f := strings.Fields(p); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
				return f[0]
			}
		}
	}
	return ""
}

// aptConfig writes an apt configuration in dir whose only sources are the
// suites ("ARCHIVE SUITE", main component, from debianMirror, checked
// against Debian's archive keyring), and returns the options that make
// apt-get and apt-cache use it.
func aptConfig(dir string, suites []string) ([]string, error) {
	const keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
	var list strings.Builder
	for _, s := range suites {
		archive, suite, _ := strings.Cut(s, " ")
		fmt.Fprintf(&list, "deb [signed-by=%s] %s/%s %s main\n", keyring, debianMirror, archive, suite)
	}
	apt := filepath.Join(dir, "apt")
	for _, d := range []string{"lists/partial", "archives/partial", "parts", "prefs"} {
		if err := os.MkdirAll(filepath.Join(apt, d), 0o755); err != nil {
			return nil, err
		}
	}
	sources := filepath.Join(apt, "sources.list")
	if err := os.WriteFile(sources, []byte(list.String()), 0o644); err != nil {
		return nil, err
	}
	return []string{
		"-o", "Dir::Etc::SourceList=" + sources,
		"-o", "Dir::Etc::SourceParts=" + filepath.Join(apt, "parts"),
		"-o", "Dir::Etc::PreferencesParts=" + filepath.Join(apt, "prefs"),
		"-o", "Dir::State::Lists=" + filepath.Join(apt, "lists"),
		"-o", "Dir::Cache=" + apt,
		"-o", "Dir::Cache::Archives=" + filepath.Join(apt, "archives"),
		"-o", "APT::Architecture=amd64",
	}, nil
}

// field is the value of the first "NAME: value" line of an apt record.
func field(record, name string) string {
	for _, line := range strings.Split(record, "\n") {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// unpackDebian unpacks a kernel's packages into root once and returns
// its image.
func unpackDebian(root, name string, debs []string) (*image, string, error) {
	if _, err := os.Stat(filepath.Join(root, ".unpacked")); err != nil {
		os.RemoveAll(root)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, "", err
		}
		for _, deb := range debs {
			if _, err := command("", "dpkg-deb", "-x", deb, root); err != nil {
				return nil, "", fmt.Errorf("dpkg-deb -x %s: %w", deb, err)
			}
		}
		if err := os.WriteFile(filepath.Join(root, ".unpacked"), nil, 0o644); err != nil {
			return nil, "", err
		}
	}
	// The image is boot/vmlinuz-RELEASE, or in the modules' directory
	// (usr/lib/modules/RELEASE/vmlinuz) where newer packages put it.
	var release, vmlinuz string
	if vmlinuz = newest(filepath.Join(root, "boot", "vmlinuz-*")); vmlinuz != "" {
		release = strings.TrimPrefix(filepath.Base(vmlinuz), "vmlinuz-")
	} else if vmlinuz = newest(filepath.Join(root, "usr", "lib", "modules", "*", "vmlinuz")); vmlinuz != "" {
		release = filepath.Base(filepath.Dir(vmlinuz))
	} else {
		return nil, "", fmt.Errorf("%s: no kernel image in %s", name, strings.Join(debs, ", "))
	}
	img := &image{name: name, release: release, vmlinuz: vmlinuz, modules: filepath.Join(root, "lib", "modules", release)}
	if _, err := os.Stat(img.modules); err != nil {
		img.modules = filepath.Join(root, "usr", "lib", "modules", release)
	}
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
