//go:build !linux

package ethtool

import (
	"errors"
	"runtime"
)

var errUnsupported = errors.New("ethtool: not supported on " + runtime.GOOS)

// Features fails: it needs Linux.
func Features(ifname string) (map[string]Feature, error) { return nil, errUnsupported }

// Driver fails: it needs Linux.
func Driver(ifname string) (string, error) { return "", errUnsupported }

// SetFeatures fails: it needs Linux.
func SetFeatures(ifname string, want map[string]bool) error { return errUnsupported }

// Channels fails: it needs Linux.
func Channels(ifname string) (rx, tx, combined int, err error) { return 0, 0, 0, errUnsupported }
