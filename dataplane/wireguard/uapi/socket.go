package uapi

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// SocketDir is where wg(8) looks for the sockets of userspace devices.
const SocketDir = "/var/run/wireguard"

// SocketPath returns the path of the socket of interface iface, where
// wg(8) looks for it.
func SocketPath(iface string) (string, error) {
	if iface == "" || len(iface) > 15 || strings.ContainsAny(iface, "/\x00") || iface == "." || iface == ".." {
		return "", fmt.Errorf("uapi: %q is no interface name", iface)
	}
	return filepath.Join(SocketDir, iface+".sock"), nil
}

// ErrSocketRemoved is what Server.Serve returns when the socket file
// was removed or replaced: the protocol asks a userspace device to exit
// then.
var ErrSocketRemoved = errors.New("uapi: the socket file was removed")
