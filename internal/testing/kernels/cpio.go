package kernels

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// Mode bits of a cpio entry, as in stat(2).
const (
	modeDir     = 0o040000
	modeRegular = 0o100000
	modeSymlink = 0o120000
	modeSticky  = 0o001000
)

// Archive writes a cpio archive in the "newc" format the kernel unpacks as
// an initramfs (Documentation/driver-api/early-userspace/buffer-format.rst):
// each entry is a 110-byte ASCII header, the name and the data, both padded
// to four bytes, and a "TRAILER!!!" entry ends the archive. Names are
// relative to the root ("init", "lib/modules"); the parent directories of
// every entry are written before it, once, with mode 0755.
type Archive struct {
	w    io.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

// NewArchive returns an Archive writing to w.
func NewArchive(w io.Writer) *Archive {
	return &Archive{w: w, ino: 1, dirs: map[string]bool{".": true, "": true}}
}

// Dir adds the directory name (and its parents) with permissions perm
// (and the sticky bit of os.ModeSticky).
func (a *Archive) Dir(name string, perm os.FileMode) error {
	name = clean(name)
	if a.dirs[name] {
		return a.err
	}
	a.parents(name)
	a.dirs[name] = true
	mode := modeDir | uint32(perm.Perm())
	if perm&os.ModeSticky != 0 {
		mode |= modeSticky
	}
	a.entry(name, mode, 2, nil, 0)
	return a.err
}

// File adds the regular file name with permissions perm and contents data.
func (a *Archive) File(name string, perm os.FileMode, data []byte) error {
	name = clean(name)
	a.parents(name)
	a.entry(name, modeRegular|uint32(perm.Perm()), 1, strings.NewReader(string(data)), int64(len(data)))
	return a.err
}

// CopyFile adds the regular file name with the contents and permissions of
// the file src on this machine.
func (a *Archive) CopyFile(name, src string) error {
	if a.err != nil {
		return a.err
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("cpio: %s is not a regular file", src)
	}
	name = clean(name)
	a.parents(name)
	a.entry(name, modeRegular|uint32(st.Mode().Perm()), 1, f, st.Size())
	return a.err
}

// Symlink adds the symbolic link name pointing to target.
func (a *Archive) Symlink(name, target string) error {
	name = clean(name)
	a.parents(name)
	a.entry(name, modeSymlink|0o777, 1, strings.NewReader(target), int64(len(target)))
	return a.err
}

// Close writes the trailer. It does not close the underlying writer.
func (a *Archive) Close() error {
	a.entry("TRAILER!!!", 0, 1, nil, 0)
	return a.err
}

func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func (a *Archive) parents(name string) {
	dir := path.Dir(name)
	if a.dirs[dir] {
		return
	}
	a.parents(dir)
	a.dirs[dir] = true
	a.entry(dir, modeDir|0o755, 2, nil, 0)
}

// entry writes one header, the name and size bytes of data.
func (a *Archive) entry(name string, mode, nlink uint32, data io.Reader, size int64) {
	if a.err != nil {
		return
	}
	if size > 0xffffffff {
		a.err = fmt.Errorf("cpio: %s is larger than 4 GiB", name)
		return
	}
	ino := a.ino
	a.ino++
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize (with its NUL), check.
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = append(buf, make([]byte, pad4(len(buf)))...)
	if _, a.err = a.w.Write(buf); a.err != nil {
		return
	}
	if size == 0 {
		return
	}
	n, err := io.CopyN(a.w, data, size)
	if err != nil {
		a.err = fmt.Errorf("cpio: %s: %w", name, err)
		return
	}
	_, a.err = a.w.Write(make([]byte, pad4(int(n))))
}

// pad4 is how many bytes bring n to a multiple of four.
func pad4(n int) int { return (4 - n%4) % 4 }
