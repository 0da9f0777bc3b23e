//go:build !linux

package dataplane

import (
	"errors"
	"testing"
)

// Without Linux, OpenGateway says so with the standard sentinel.
func TestOpenGatewayNotSupported(t *testing.T) {
	if _, err := OpenGateway(GatewayConfig{NIC: "eth0"}); !errors.Is(err, ErrNotSupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("OpenGateway = %v, want an error wrapping ErrNotSupported and errors.ErrUnsupported", err)
	}
}
