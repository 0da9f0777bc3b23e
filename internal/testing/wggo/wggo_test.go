package wggo

import (
	"testing"

	wgtun "golang.zx2c4.com/wireguard/tun"
)

// fakeTUN is a wgtun.Device whose events the test sends.
type fakeTUN struct {
	wgtun.Device
	events chan wgtun.Event
}

func (f *fakeTUN) Events() <-chan wgtun.Event { return f.events }

// TestSteadyTUN: up and down are hidden, other events pass (an MTU
// update with up in the same value keeps the update), and the events
// end when the device's do.
func TestSteadyTUN(t *testing.T) {
	f := &fakeTUN{events: make(chan wgtun.Event, 4)}
	s := SteadyTUN(f)
	for _, e := range []wgtun.Event{wgtun.EventUp, wgtun.EventDown, wgtun.EventMTUUpdate | wgtun.EventUp} {
		f.events <- e
	}
	close(f.events)
	var got []wgtun.Event
	for e := range s.Events() {
		got = append(got, e)
	}
	if len(got) != 1 || got[0] != wgtun.EventMTUUpdate {
		t.Errorf("events %v, want only the MTU update", got)
	}
}
