package bpfprog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// NewMaps sets the maximum entries of the maps entries names in spec and
// creates every map of spec but its data sections (.rodata and the like,
// which LoadProgram creates with each program, from spec's Variables).
// If one fails, it closes the others and names caps, the capabilities
// creating them needs, when the kernel refused it the permission.
func NewMaps(spec *ebpf.CollectionSpec, entries map[string]uint32, caps string) (map[string]*ebpf.Map, error) {
	maps := make(map[string]*ebpf.Map, len(spec.Maps))
	for name, ms := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue
		}
		if n, ok := entries[name]; ok {
			ms.MaxEntries = n
		}
		m, err := ebpf.NewMap(ms)
		if err != nil {
			for _, m := range maps {
				m.Close()
			}
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				return nil, fmt.Errorf("create BPF map %s: needs %s: %w", name, caps, err)
			}
			return nil, fmt.Errorf("create BPF map %s: %w", name, err)
		}
		maps[name] = m
	}
	return maps, nil
}

// LoadProgram loads the program name of spec, using maps (from NewMaps)
// for spec's maps of the same names, its constants as spec's Variables
// have them. The program keeps what it uses; the caller closes maps.
func LoadProgram(spec *ebpf.CollectionSpec, name string, maps map[string]*ebpf.Map) (*ebpf.Program, error) {
	one := spec.Copy()
	ps, ok := one.Programs[name]
	if !ok {
		return nil, fmt.Errorf("no BPF program %s", name)
	}
	one.Programs = map[string]*ebpf.ProgramSpec{name: ps}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: maps})
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	return coll.DetachProgram(name), nil
}

// VerifierLog returns the verifier's log if err is the kernel's verifier
// refusing a program, and nil otherwise.
func VerifierLog(err error) []string {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return ve.Log
	}
	return nil
}

// logTail is how many of the verifier log's last lines LoadError quotes.
const logTail = 8

// LoadError describes err, the kernel's refusal to load prog (such as
// "the XDP program"): when the verifier refused it, as that, with the
// last lines of the verifier's log; when it was EPERM without a log, as
// the capabilities caps missing; otherwise as it is.
func LoadError(prog, caps string, err error) error {
	if log := VerifierLog(err); len(log) > 0 {
		return fmt.Errorf("the kernel's verifier refused %s: %w; the end of its log:\n\t%s",
			prog, err, strings.Join(log[max(len(log)-logTail, 0):], "\n\t"))
	}
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("load %s: needs %s: %w", prog, caps, err)
	}
	return fmt.Errorf("load %s: %w", prog, err)
}
