// Package wggo adapts wireguard-go's TUN devices for the tests and the
// bench, which run wireguard-go as a peer inside network namespaces.
package wggo

import wgtun "golang.zx2c4.com/wireguard/tun"

// SteadyTUN hides the link's up and down events from a wireguard-go
// device on dev. On them the device brings itself up or down, and up
// binds its UDP sockets on the thread of the goroutine that reads the
// events, outside the namespace: the peer then listens in the wrong
// one, and no handshake ever completes. The caller brings the link and
// the device up itself, in the namespace, once. Other events pass.
func SteadyTUN(dev wgtun.Device) wgtun.Device {
	s := &steady{Device: dev, events: make(chan wgtun.Event, 4)}
	go func() {
		defer close(s.events)
		for e := range dev.Events() {
			if e &^= wgtun.EventUp | wgtun.EventDown; e != 0 {
				s.events <- e
			}
		}
	}()
	return s
}

type steady struct {
	wgtun.Device
	events chan wgtun.Event
}

func (s *steady) Events() <-chan wgtun.Event { return s.events }
