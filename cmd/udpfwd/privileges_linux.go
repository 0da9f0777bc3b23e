package main

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/privs"
)

// A capability is a Linux capability and why udpfwd needs it.
type capability struct {
	bit uint
	why string
}

// name is the capability's name, such as CAP_NET_ADMIN.
func (c capability) name() string { return privs.Caps(1 << c.bit).String() }

var (
	capNetAdmin = capability{unix.CAP_NET_ADMIN, "TUN device, XDP attach, addresses, routes, next-hop probes"}
	capNetRaw   = capability{unix.CAP_NET_RAW, "AF_XDP sockets"}
	capBPF      = capability{unix.CAP_BPF, "loading the XDP program and its maps"}
	capSetUID   = capability{unix.CAP_SETUID, "-user"}
	capSetGID   = capability{unix.CAP_SETGID, "-user"}
)

// keptCaps is what the running gateway keeps after set-up: CAP_NET_ADMIN,
// because the dataplane asks the kernel to resolve next hops
// (RTM_NEWNEIGH) while it runs, and udpfwd removes its addresses and
// routes at exit. The sockets and the XDP program's BPF link need nothing.
const keptCaps privs.Caps = 1 << unix.CAP_NET_ADMIN

// checkCaps names every capability set-up needs and the process lacks,
// and how to grant it.
func checkCaps(cfg *config) problems {
	eff, err := privs.Effective()
	if err != nil {
		return problems{err.Error()}
	}
	need := []capability{capNetAdmin, capNetRaw, capBPF}
	if cfg.User != "" {
		need = append(need, capSetUID, capSetGID)
	}
	var missing, why []string
	for _, c := range need {
		if eff&(1<<c.bit) == 0 && (c != capBPF || eff&(1<<unix.CAP_SYS_ADMIN) == 0) {
			missing = append(missing, c.name())
			why = append(why, fmt.Sprintf("%s (%s)", c.name(), c.why))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return problems{fmt.Sprintf("missing capabilities %s: run as root, or grant them with `setcap %s+ep %s`, or with AmbientCapabilities=%s in a systemd unit (see contrib/udpfwd.service)",
		strings.Join(why, ", "), strings.ToLower(strings.Join(missing, ",")), executable(), strings.Join(missing, " "))}
}

func executable() string {
	exe, err := os.Executable()
	if err != nil {
		return "udpfwd"
	}
	return exe
}

// lookupAccount resolves -user (a name or a numeric uid) and checks that
// this binary can switch every thread to it.
func lookupAccount(spec string) (*privs.Account, error) {
	a, err := privs.LookupAccount(spec)
	if err != nil {
		return nil, fmt.Errorf("-user %q: %w", spec, err)
	}
	return a, nil
}
