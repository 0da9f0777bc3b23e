package wireguard

import (
	"bytes"
	"testing"
	"time"
)

// TestCookie: a responder under load answers an initiation without a
// valid MAC2 with a cookie reply; the initiator's next initiation
// carries MAC2 with the cookie and is accepted. A cookie from another
// source address, or one older than CookieRefresh, does not pass.
func TestCookie(t *testing.T) {
	s := newPair(t, Key{}, nil)
	init, _ := s.a.AppendInitiation(nil, s.pa)
	reply, p, err := s.b.Handle(nil, init, addrA, true)
	if err != NeedCookie || p != nil || len(reply) != CookieReplySize || Type(reply) != TypeCookieReply {
		t.Fatalf("initiation under load: %v, %d bytes", err, len(reply))
	}
	if _, _, err := s.a.Handle(nil, reply, addrB, false); err != nil {
		t.Fatalf("cookie reply: %v", err)
	}
	if _, _, err := s.a.Handle(nil, reply, addrB, false); err != nil {
		t.Fatalf("cookie reply again: %v", err) // a replay of it only refreshes it
	}
	init2 := s.fresh(t)
	if o2 := InitiationSize - macLen; bytes.Equal(init2[o2:], make([]byte, macLen)) {
		t.Fatal("no MAC2")
	}
	if _, _, err := s.b.Handle(nil, init2, netipAddrPort(addrA, 1), true); err != NeedCookie {
		t.Errorf("MAC2 from another port: %v", err)
	}
	init3 := s.fresh(t)
	resp, p, err := s.b.Handle(nil, init3, addrA, true)
	if err != nil || p != s.pb || Type(resp) != TypeResponse {
		t.Fatalf("initiation with MAC2 under load: %v", err)
	}
	// The response under load at a: a has no cookie from b for it.
	r, _, err := s.a.Handle(nil, resp, addrB, true)
	if err != NeedCookie || Type(r) != TypeCookieReply {
		t.Fatalf("response under load: %v", err)
	}
	if _, _, err := s.b.Handle(nil, r, addrA, false); err != nil {
		t.Fatalf("cookie reply to a response: %v", err)
	}
	// The cookie expires with CookieRefresh, and the secret with it.
	s.clk.Add(DefaultTimers.CookieRefresh)
	init4 := s.fresh(t)
	if o2 := InitiationSize - macLen; !bytes.Equal(init4[o2:], make([]byte, macLen)) {
		t.Error("MAC2 with an expired cookie")
	}
	if _, _, err := s.b.Handle(nil, init4, addrA, true); err != NeedCookie {
		t.Errorf("initiation with an expired cookie: %v", err)
	}
	// Not under load, MAC2 is not looked at.
	s.clk.Add(time.Second)
	if _, _, err := s.b.Handle(nil, s.fresh(t), addrA, false); err != nil {
		t.Errorf("initiation not under load: %v", err)
	}
}
