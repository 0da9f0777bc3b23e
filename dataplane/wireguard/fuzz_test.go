package wireguard

import (
	"bytes"
	"testing"
)

// fuzzMessage fuzzes one message parser: each input is XORed onto a
// valid message that build makes with a new pair of devices (its length
// the input's: cut, or extended with zeros), and deliver hands the result
// to the device it is for. The message must be accepted if the input
// changes nothing it authenticates (all but its last free bytes: a
// handshake message's MAC2, which is not checked when not under load),
// and refused otherwise, never panicking.
func fuzzMessage(f *testing.F, size, free int, build func(t *testing.T, s *pair) ([]byte, func([]byte) Reason)) {
	f.Add(make([]byte, size))
	f.Add(make([]byte, size+1))
	f.Add(make([]byte, size-1))
	f.Add([]byte{1})
	f.Add(append(make([]byte, size-1), 1))
	f.Add(append([]byte{0, 0, 0, 1}, make([]byte, size-4)...))
	f.Fuzz(func(t *testing.T, mask []byte) {
		s := newPair(t, Key{}, nil)
		valid, deliver := build(t, s)
		msg := make([]byte, len(mask))
		copy(msg, valid)
		for i := range msg {
			msg[i] ^= mask[i]
		}
		unchanged := len(mask) == len(valid) && bytes.Count(mask[:len(mask)-free], []byte{0}) == len(mask)-free
		r := deliver(msg)
		if accepted := r == OK || r == Keepalive; accepted != unchanged {
			t.Fatalf("message changed %v, accepted %v (%v)", !unchanged, accepted, r)
		}
	})
}

// reason returns the Reason an error from Handle is.
func reason(err error) Reason {
	if err == nil {
		return OK
	}
	return err.(Reason)
}

func FuzzInitiation(f *testing.F) {
	fuzzMessage(f, InitiationSize, macLen, func(t *testing.T, s *pair) ([]byte, func([]byte) Reason) {
		init, _ := s.a.AppendInitiation(nil, s.pa)
		return init, func(msg []byte) Reason {
			_, _, err := s.b.Handle(nil, msg, addrA, false)
			return reason(err)
		}
	})
}

func FuzzResponse(f *testing.F) {
	fuzzMessage(f, ResponseSize, macLen, func(t *testing.T, s *pair) ([]byte, func([]byte) Reason) {
		init, _ := s.a.AppendInitiation(nil, s.pa)
		resp, _, err := s.b.Handle(nil, init, addrA, false)
		if err != nil {
			t.Fatal(err)
		}
		return resp, func(msg []byte) Reason {
			_, _, err := s.a.Handle(nil, msg, addrB, false)
			return reason(err)
		}
	})
}

func FuzzCookieReply(f *testing.F) {
	fuzzMessage(f, CookieReplySize, 0, func(t *testing.T, s *pair) ([]byte, func([]byte) Reason) {
		init, _ := s.a.AppendInitiation(nil, s.pa)
		reply, _, _ := s.b.Handle(nil, init, addrA, true)
		return reply, func(msg []byte) Reason {
			_, _, err := s.a.Handle(nil, msg, addrB, false)
			return reason(err)
		}
	})
}

func FuzzData(f *testing.F) {
	fuzzMessage(f, HeaderLen+48+TagLen, 0, func(t *testing.T, s *pair) ([]byte, func([]byte) Reason) {
		s.handshake(t)
		return sealOne(t, s.a, s.pa, ipv4(37, 9)), func(msg []byte) Reason {
			pkts := []Packet{{Buf: msg, Addr: addrA}}
			s.b.Open(pkts)
			return pkts[0].Reason
		}
	})
}
