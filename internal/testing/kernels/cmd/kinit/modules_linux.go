package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/testing/kernels"
)

// load loads the module name and its dependencies. A module already
// loaded or built in is no error.
func load(mods *kernels.Modules, name string) error {
	if mods.Builtin(name) {
		return nil
	}
	files, err := mods.Order(name)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := insmod(filepath.Join(mods.Dir, f)); err != nil {
			return fmt.Errorf("load %s: %s: %w", name, f, err)
		}
	}
	return nil
}

// insmod loads the module in file with finit_module(2); the kernel
// decompresses a compressed one itself.
func insmod(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if !strings.HasSuffix(file, ".ko") {
		flags |= unix.MODULE_INIT_COMPRESSED_FILE
	}
	err = unix.FinitModule(int(f.Fd()), "", flags)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// coldplug loads the modules of the devices on the buses, as udev does at
// boot: every module whose alias matches a device's modalias. Loading a bus
// driver (virtio_pci) makes new devices (virtio0...), so it goes round
// until a round finds nothing new.
func coldplug(mods *kernels.Modules) {
	done := map[string]bool{}
	for round := 0; round < 4; round++ {
		paths, _ := filepath.Glob("/sys/bus/*/devices/*/modalias")
		found := false
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			alias := strings.TrimSpace(string(b))
			if alias == "" || done[alias] {
				continue
			}
			done[alias] = true
			for _, name := range mods.Lookup(alias) {
				found = true
				if err := load(mods, name); err != nil {
					fmt.Println("kinit:", err)
				}
			}
		}
		if !found {
			return
		}
	}
}

// modprobe answers the kernel's request_module: `modprobe -q -- NAME`.
func modprobe(args []string) int {
	var names []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			names = append(names, a)
		}
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return 1
	}
	mods, err := kernels.ReadModules(filepath.Join("/lib/modules", unix.ByteSliceToString(uts.Release[:])))
	if err != nil {
		fmt.Fprintln(os.Stderr, "modprobe:", err)
		return 1
	}
	code := 0
	for _, n := range names {
		if mods.Builtin(n) {
			continue
		}
		found := mods.Lookup(n)
		if len(found) == 0 {
			code = 1
			continue
		}
		for _, m := range found {
			if err := load(mods, m); err != nil {
				fmt.Fprintln(os.Stderr, "modprobe:", err)
				code = 1
			}
		}
	}
	return code
}
