package main

import (
	"strings"
	"testing"

	"github.com/gsoplane/gsoplane/dataplane"
)

// TestZeroCopyFlag checks -xdp-zerocopy: its words, its environment
// variable, the combinations refused before anything is touched, and
// that it reaches the dataplane's config.
func TestZeroCopyFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want dataplane.XDPZeroCopy
	}{
		{[]string{"-nic", "eth0"}, nil, dataplane.XDPZeroCopyAuto},
		{[]string{"-nic", "eth0", "-xdp-zerocopy", "on", "-port", "xdp"}, nil, dataplane.XDPZeroCopyOn},
		{[]string{"-nic", "eth0", "-xdp-zerocopy", "off"}, nil, dataplane.XDPZeroCopyOff},
		{[]string{"-nic", "eth0"}, map[string]string{"UDPFWD_XDP_ZEROCOPY": "on"}, dataplane.XDPZeroCopyOn},
		{[]string{"-nic", "eth0", "-xdp-zerocopy", "off", "-port", "packet"}, nil, dataplane.XDPZeroCopyOff},
	} {
		cfg, err := parseConfig(c.args, env(c.env))
		if err != nil {
			t.Errorf("%v %v: %v", c.args, c.env, err)
			continue
		}
		if got := gatewayConfig(cfg).XDP.ZeroCopy; got != c.want {
			t.Errorf("%v %v: zero-copy %v, want %v", c.args, c.env, got, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-xdp-zerocopy", "yes"}, `invalid value "yes" for flag -xdp-zerocopy: want auto, on or off`},
		{[]string{"-xdp-zerocopy", "on", "-port", "packet"}, "-xdp-zerocopy on: zero-copy is for AF_XDP sockets, not -port packet"},
		{[]string{"-xdp-zerocopy", "on", "-xdp-mode", "generic"}, "-xdp-zerocopy on: zero-copy needs the XDP program in the driver"},
	} {
		_, err := parseConfig(append([]string{"-nic", "eth0"}, c.args...), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
