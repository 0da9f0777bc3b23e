package kernels

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Modules is a kernel's module index, read from the modules.dep,
// modules.alias and modules.builtin files under /lib/modules/VERSION
// (depmod(8) writes them).
type Modules struct {
	Dir string // the /lib/modules/VERSION directory

	deps    map[string][]string // module file (relative to Dir) → its dependencies' files
	files   map[string]string   // module name → its file
	aliases [][2]string         // pattern, module name, in file order
	builtin map[string]bool     // module names built into the kernel
}

// ReadModules reads the index under dir. modules.alias and modules.builtin
// are optional. Without modules.dep it indexes the modules themselves
// (ScanModules).
func ReadModules(dir string) (*Modules, error) {
	m := &Modules{Dir: dir, deps: map[string][]string{}, files: map[string]string{}, builtin: map[string]bool{}}
	if _, err := os.Stat(filepath.Join(dir, "modules.dep")); isNotExist(err) {
		return ScanModules(dir)
	}
	err := eachLine(filepath.Join(dir, "modules.dep"), func(line string) {
		file, deps, ok := strings.Cut(line, ":")
		if !ok {
			return
		}
		m.deps[file] = strings.Fields(deps)
		m.files[ModuleName(file)] = file
	})
	if err != nil {
		return nil, err
	}
	err = eachLine(filepath.Join(dir, "modules.alias"), func(line string) {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "alias" {
			m.aliases = append(m.aliases, [2]string{f[1], ModuleName(f[2])})
		}
	})
	if err != nil && !isNotExist(err) {
		return nil, err
	}
	err = eachLine(filepath.Join(dir, "modules.builtin"), func(line string) {
		m.builtin[ModuleName(line)] = true
	})
	if err != nil && !isNotExist(err) {
		return nil, err
	}
	return m, nil
}

func eachLine(name string, fn func(string)) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return scanLines(f, fn)
}

func scanLines(r io.Reader, fn func(string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			fn(line)
		}
	}
	return sc.Err()
}

// ModuleName is the name of the module in file ("kernel/net/sched/cls_bpf.ko"
// → "cls_bpf"), with dashes as underscores, as the kernel names modules.
func ModuleName(file string) string {
	name := path.Base(file)
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		name = strings.TrimSuffix(name, ext)
	}
	return strings.ReplaceAll(strings.TrimSuffix(name, ".ko"), "-", "_")
}

// Builtin reports whether the module name is built into the kernel.
func (m *Modules) Builtin(name string) bool {
	return m.builtin[ModuleName(name)]
}

// Lookup returns the names of the modules that provide name: the module of
// that name, else every module with a matching alias ("net-pf-44",
// "pci:v00001AF4d00001000sv...", patterns as fnmatch(3)).
func (m *Modules) Lookup(name string) []string {
	if _, ok := m.files[ModuleName(name)]; ok {
		return []string{ModuleName(name)}
	}
	var out []string
	seen := map[string]bool{}
	for _, a := range m.aliases {
		if ok, _ := path.Match(a[0], name); ok && !seen[a[1]] {
			seen[a[1]] = true
			out = append(out, a[1])
		}
	}
	return out
}

// Order returns the files (relative to Dir) to load for the module name,
// its dependencies first, each once.
func (m *Modules) Order(name string) ([]string, error) {
	file, ok := m.files[ModuleName(name)]
	if !ok {
		return nil, fmt.Errorf("module %s not in %s/modules.dep", name, m.Dir)
	}
	return m.withDeps([]string{file}), nil
}

// Closure returns the module files under the directories dirs (relative to
// Dir, such as "kernel/net") and every file they depend on, each after its
// dependencies.
func (m *Modules) Closure(dirs []string) []string {
	files := make([]string, 0, len(m.deps))
	for f := range m.deps {
		for _, d := range dirs {
			if strings.HasPrefix(f, strings.TrimSuffix(d, "/")+"/") {
				files = append(files, f)
				break
			}
		}
	}
	sort.Strings(files)
	return m.withDeps(files)
}

// withDeps returns files and everything they depend on, each once and
// after its dependencies.
func (m *Modules) withDeps(files []string) []string {
	var out []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(f string) {
		if seen[f] {
			return
		}
		seen[f] = true
		for _, d := range m.deps[f] {
			visit(d)
		}
		out = append(out, f)
	}
	for _, f := range files {
		visit(f)
	}
	return out
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
