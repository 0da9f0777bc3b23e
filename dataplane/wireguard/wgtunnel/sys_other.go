//go:build !linux

package wgtunnel

import (
	"fmt"
	"net"
	"runtime"

	"github.com/vishvananda/netns"

	"github.com/gsoplane/gsoplane/dataplane/frame"
)

var errNotSupported = fmt.Errorf("%w on %s", frame.ErrNotSupported, runtime.GOOS)

// currentNS fails: the Device is Linux's (New returns this error).
func currentNS() (netns.NsHandle, error) { return netns.None(), errNotSupported }

func inNS(_ netns.NsHandle, fn func() error) error { return fn() }

func linkMTU(int) (int, error) { return 0, errNotSupported }

func setMark(*net.UDPConn, uint32) error { return errNotSupported }
