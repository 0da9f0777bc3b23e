package main

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gsoplane/gsoplane/internal/privs"
)

// keptCaps is what wggso keeps once set up, for what wg may ask of it
// live: CAP_NET_ADMIN marks the socket (SO_MARK, FwMark) and forces its
// buffers past the sysctl limits each time the tunnel opens again
// (SO_SNDBUFFORCE, SO_RCVBUFFORCE: a new listen port, a new MTU, the
// first peer); CAP_NET_BIND_SERVICE binds a listen port below 1024. The
// TUN device, the sockets and the configuration socket need nothing once
// open. The uid stays 0: the configuration socket is root's, for wg run
// as root, and removing it at exit needs write access to its directory
// (/var/run/wireguard, root's, 0755), which uid 0 has as the owner,
// without CAP_DAC_OVERRIDE.
const keptCaps privs.Caps = 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_BIND_SERVICE

// dropPrivileges leaves every thread of wggso with keptCaps (those of
// them it was given), the bounding set cut and the securebits locked
// where it may, and no_new_privs set (internal/privs.Drop). A binary
// built with cgo cannot change every thread: that is an error too.
func dropPrivileges() error {
	if err := privs.Drop(keptCaps, nil); err != nil {
		return fmt.Errorf("cannot drop privileges: %w", err)
	}
	return nil
}
