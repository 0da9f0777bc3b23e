package kernels

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// ScanModules builds the index of the modules under dir from the modules
// themselves, for a kernel package unpacked without installing it (depmod
// has not run, so there is no modules.dep): each module's .modinfo section
// names its dependencies ("depends=") and aliases ("alias="). Compressed
// modules (.ko.xz, .ko.zst, .ko.gz, as newer kernel packages ship them) are
// decompressed to be read, with the xz and zstd commands for the first two.
// modules.builtin is read if present.
func ScanModules(dir string) (*Modules, error) {
	m := &Modules{Dir: dir, deps: map[string][]string{}, files: map[string]string{}, builtin: map[string]bool{}}
	depNames := map[string][]string{} // file → its dependencies' names
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.Contains(d.Name(), ".ko") {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		info, err := modinfo(p)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		name := ModuleName(rel)
		m.files[name] = rel
		m.deps[rel] = nil
		for _, kv := range info {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "depends":
				for _, d := range strings.Split(v, ",") {
					if d != "" {
						depNames[rel] = append(depNames[rel], ModuleName(d))
					}
				}
			case "alias":
				m.aliases = append(m.aliases, [2]string{v, name})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for file, names := range depNames {
		for _, n := range names {
			dep, ok := m.files[n]
			if !ok {
				return nil, fmt.Errorf("%s depends on %s, which is not under %s", file, n, dir)
			}
			m.deps[file] = append(m.deps[file], dep)
		}
	}
	sort.Slice(m.aliases, func(i, j int) bool {
		if m.aliases[i][1] != m.aliases[j][1] {
			return m.aliases[i][1] < m.aliases[j][1]
		}
		return m.aliases[i][0] < m.aliases[j][0]
	})
	err = eachLine(filepath.Join(dir, "modules.builtin"), func(line string) {
		m.builtin[ModuleName(line)] = true
	})
	if err != nil && !isNotExist(err) {
		return nil, err
	}
	return m, nil
}

// modinfo returns the NUL-separated "key=value" strings of the module's
// .modinfo section.
func modinfo(file string) ([]string, error) {
	obj, err := readModule(file)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		return nil, err
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("no .modinfo section")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range bytes.Split(data, []byte{0}) {
		if len(s) > 0 {
			out = append(out, string(s))
		}
	}
	return out, nil
}

// readModule returns the module in file, decompressed.
func readModule(file string) ([]byte, error) {
	var tool string
	switch {
	case strings.HasSuffix(file, ".ko"):
		return os.ReadFile(file)
	case strings.HasSuffix(file, ".ko.gz"):
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(z)
	case strings.HasSuffix(file, ".ko.xz"):
		tool = "xz"
	case strings.HasSuffix(file, ".ko.zst"):
		tool = "zstd"
	default:
		return nil, fmt.Errorf("not a module (.ko, .ko.xz, .ko.zst, .ko.gz)")
	}
	out, err := exec.Command(tool, "-dc", file).Output()
	if err != nil {
		return nil, fmt.Errorf("%s -dc: %w (the compressed modules are read with %s)", tool, err, tool)
	}
	return out, nil
}

// WriteIndex writes the index as depmod's modules.dep (files: the modules
// to write, others are left out) and modules.alias.
func (m *Modules) WriteIndex(dep, alias io.Writer, files []string) error {
	keep := map[string]bool{}
	for _, f := range files {
		keep[f] = true
	}
	for _, f := range files {
		var deps []string
		for _, d := range m.deps[f] {
			if keep[d] {
				deps = append(deps, d)
			}
		}
		if _, err := fmt.Fprintf(dep, "%s: %s\n", f, strings.Join(deps, " ")); err != nil {
			return err
		}
	}
	for _, a := range m.aliases {
		if !keep[m.files[a[1]]] {
			continue
		}
		if _, err := fmt.Fprintf(alias, "alias %s %s\n", a[0], a[1]); err != nil {
			return err
		}
	}
	return nil
}
