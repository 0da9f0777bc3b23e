package main

import (
	"strings"
	"testing"
	"time"
)

// TestBusyPollFlag checks -busy-poll: its range, its environment
// variable, AF_XDP only, and that it reaches the dataplane's config.
func TestBusyPollFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{[]string{"-nic", "eth0"}, nil, 0},
		{[]string{"-nic", "eth0", "-busy-poll", "50us"}, nil, 50 * time.Microsecond},
		{[]string{"-nic", "eth0", "-busy-poll", "1us", "-port", "xdp"}, nil, time.Microsecond},
		{[]string{"-nic", "eth0"}, map[string]string{"UDPFWD_BUSY_POLL": "1ms"}, time.Millisecond},
		{[]string{"-nic", "eth0", "-busy-poll", "0", "-port", "packet"}, nil, 0},
	} {
		cfg, err := parseConfig(c.args, env(c.env))
		if err != nil {
			t.Errorf("%v %v: %v", c.args, c.env, err)
			continue
		}
		if cfg.BusyPoll != c.want || gatewayConfig(cfg).XDP.BusyPoll != c.want {
			t.Errorf("%v %v: -busy-poll %v (dataplane %v), want %v", c.args, c.env, cfg.BusyPoll, gatewayConfig(cfg).XDP.BusyPoll, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-busy-poll", "500ns"}, "-busy-poll 500ns: want 0 (off) or 1µs to 1ms"},
		{[]string{"-busy-poll", "2ms"}, "-busy-poll 2ms: want 0 (off) or 1µs to 1ms"},
		{[]string{"-busy-poll", "-1us"}, "-busy-poll -1µs: want 0 (off) or 1µs to 1ms"},
		{[]string{"-busy-poll", "50us", "-port", "packet"}, "-busy-poll 50µs: busy polling is for AF_XDP sockets"},
	} {
		_, err := parseConfig(append([]string{"-nic", "eth0"}, c.args...), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
