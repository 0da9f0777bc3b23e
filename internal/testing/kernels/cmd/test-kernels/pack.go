package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/gsoplane/gsoplane/internal/testing/kernels"
)

// The files of a minimal system: root and nobody (the privilege tests drop
// to nobody).
const (
	passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group  = "root:x:0:\nnogroup:x:65534:\n"
)

// pack writes the guest's initramfs for img to name: the init (also as
// /sbin/modprobe and /bin/go), the binaries, each package's testdata and
// sources, the module's contrib, docs and README, the kernel's modules
// and the plan.
func pack(name string, img *image, b *binaries, plan *kernels.Plan) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		return err
	}
	a := kernels.NewArchive(zw)

	a.Dir("tmp", 0o777|os.ModeSticky)
	for _, d := range []string{"dev", "proc", "sys", "run", "root", "etc/kernels", "usr/bin", "usr/sbin"} {
		a.Dir(d, 0o755)
	}
	a.Symlink("var/run", "../run")
	a.CopyFile("init", b.kinit)
	a.Symlink("sbin/modprobe", "/init")
	a.Symlink("bin/go", "/init")
	a.File("etc/passwd", 0o644, []byte(passwd))
	a.File("etc/group", 0o644, []byte(group))
	a.File("etc/hostname", 0o644, []byte("kernels\n"))

	for _, bin := range append(b.steps, b.extra...) {
		if err := a.CopyFile(bin.guest, bin.host); err != nil {
			return err
		}
	}
	for _, bin := range append(b.steps, b.extra...) {
		if bin.dir == "" {
			continue
		}
		a.Dir(bin.dir, 0o755)
		if bin.src == "" {
			continue
		}
		if err := packTree(a, filepath.Join(bin.src, "testdata"), path.Join(bin.dir, "testdata")); err != nil {
			return err
		}
		if err := packSources(a, bin.src, bin.dir); err != nil {
			return err
		}
	}
	for _, d := range []string{"contrib", "docs"} { // read by tests as ../../contrib, ../../docs
		if err := packTree(a, filepath.Join(b.root, d), "/src/"+d); err != nil {
			return err
		}
	}
	if err := a.CopyFile("/src/README.md", filepath.Join(b.root, "README.md")); err != nil {
		return err
	}
	if img.modules != "" {
		if err := packModules(a, img); err != nil {
			return err
		}
	}
	js, err := plan.Marshal()
	if err != nil {
		return err
	}
	a.File(kernels.PlanPath, 0o644, js)
	if err := a.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// packTree copies the directory tree src, if it exists, to dst.
func packTree(a *kernels.Archive, src, dst string) error {
	if _, err := os.Stat(src); os.IsNotExist(err) {
		return nil
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			return a.Dir(target, 0o755)
		case d.Type().IsRegular():
			return a.CopyFile(target, p)
		}
		return nil
	})
}

// packSources copies the Go files of the package in src (not its tests)
// to dst: tests that check the docs' excerpts against the code read them.
func packSources(a *kernels.Archive, src, dst string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.go"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if err := a.CopyFile(path.Join(dst, filepath.Base(f)), f); err != nil {
			return err
		}
	}
	return nil
}

// packModules copies the modules of moduleDirs, with their dependencies,
// and writes their index (modules.dep and modules.alias of these modules
// only, whether or not depmod has run) and modules.builtin.
func packModules(a *kernels.Archive, img *image) error {
	mods, err := kernels.ReadModules(img.modules)
	if err != nil {
		return err
	}
	dst := path.Join("lib/modules", img.release)
	files := mods.Closure(moduleDirs)
	var dep, alias bytes.Buffer
	if err := mods.WriteIndex(&dep, &alias, files); err != nil {
		return err
	}
	a.File(path.Join(dst, "modules.dep"), 0o644, dep.Bytes())
	a.File(path.Join(dst, "modules.alias"), 0o644, alias.Bytes())
	if src := filepath.Join(img.modules, "modules.builtin"); exists(src) {
		if err := a.CopyFile(path.Join(dst, "modules.builtin"), src); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := a.CopyFile(path.Join(dst, f), filepath.Join(img.modules, filepath.FromSlash(f))); err != nil {
			return err
		}
	}
	return nil
}

func exists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}
