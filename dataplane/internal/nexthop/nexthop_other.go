//go:build !linux

package nexthop

import (
	"errors"
	"runtime"
)

// system is the kernel side of a Resolver: none here.
type system struct{}

// New fails: it needs Linux.
func New(cfg Config) (*Resolver, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, errors.New("nexthop: not supported on " + runtime.GOOS)
}

// Close does nothing: no Resolver exists here.
func (r *Resolver) Close() {}
