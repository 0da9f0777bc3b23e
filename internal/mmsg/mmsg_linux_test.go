package mmsg

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// pair returns the two ends of a datagram socket pair, closed when the
// test ends: no network, no privileges.
func pair(t testing.TB) (int, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

func TestSendRecv(t *testing.T) {
	a, b := pair(t)
	out, in := New(4), New(4)
	var sent, bufs [][]byte
	for i := range out.Len() {
		msg := bytes.Repeat([]byte{byte('a' + i)}, 10*(i+1))
		out.Set(i, msg)
		sent = append(sent, msg)
		bufs = append(bufs, make([]byte, 64))
		in.Set(i, bufs[i])
	}
	if n, errno := out.Send(uintptr(a), 1, 3); n != 2 || errno != 0 {
		t.Fatalf("Send [1, 3): %d, %v", n, errno)
	}
	if n, errno := out.Send(uintptr(a), 3, 4); n != 1 || errno != 0 {
		t.Fatalf("Send [3, 4): %d, %v", n, errno)
	}
	if l := out.MsgLen(1); l != 20 {
		t.Errorf("sent message 1: MsgLen %d, want 20", l)
	}
	n, errno := in.Recv(uintptr(b), 4)
	if n != 3 || errno != 0 {
		t.Fatalf("Recv: %d, %v; want the 3 sent", n, errno)
	}
	for i := range n {
		got := bufs[i][:in.MsgLen(i)]
		if !bytes.Equal(got, sent[i+1]) || in.Flags(i) != 0 || in.ControlLen(i) != 0 {
			t.Errorf("message %d: %q flags %#x control %d, want %q", i, got, in.Flags(i), in.ControlLen(i), sent[i+1])
		}
	}
	if n, errno := in.Recv(uintptr(b), 4); n != 0 || errno != unix.EAGAIN {
		t.Errorf("Recv with nothing waiting: %d, %v; want 0, EAGAIN", n, errno)
	}
	if n, errno := in.Recv(uintptr(b), 0); n != 0 || errno != 0 {
		t.Errorf("Recv of no messages: %d, %v", n, errno)
	}
	if n, errno := out.Send(uintptr(a), 2, 2); n != 0 || errno != 0 {
		t.Errorf("Send of no messages: %d, %v", n, errno)
	}
	if n, errno := out.Send(^uintptr(0), 0, 1); n != 0 || errno != unix.EBADF {
		t.Errorf("Send on a bad descriptor: %d, %v", n, errno)
	}
	out.Clear(2)
	if out.BufLen(0) != 0 || out.BufLen(1) != 0 || out.BufLen(2) != 30 {
		t.Errorf("after Clear(2): buffer lengths %d %d %d, want 0 0 30", out.BufLen(0), out.BufLen(1), out.BufLen(2))
	}
}

// TestTruncated: a message longer than its buffer comes with MSG_TRUNC,
// and the next Recv starts with clean flags.
func TestTruncated(t *testing.T) {
	a, b := pair(t)
	out, in := New(1), New(2)
	in.Set(0, make([]byte, 4))
	in.Set(1, make([]byte, 4))
	out.Set(0, []byte("0123456789"))
	if n, errno := out.Send(uintptr(a), 0, 1); n != 1 || errno != 0 {
		t.Fatalf("Send: %d, %v", n, errno)
	}
	if n, errno := in.Recv(uintptr(b), 2); n != 1 || errno != 0 || in.Flags(0)&unix.MSG_TRUNC == 0 || in.MsgLen(0) != 4 {
		t.Fatalf("Recv: %d, %v, flags %#x, length %d; want 1 message of 4 bytes with MSG_TRUNC", n, errno, in.Flags(0), in.MsgLen(0))
	}
	out.Set(0, []byte("0123"))
	out.Send(uintptr(a), 0, 1)
	if n, _ := in.Recv(uintptr(b), 2); n != 1 || in.Flags(0) != 0 {
		t.Errorf("Recv after a truncated one: %d, flags %#x", n, in.Flags(0))
	}
}

// TestControl: the control buffers receive each message's control
// messages (here SCM_CREDENTIALS), every Recv offers them whole again,
// and Send leaves them out.
func TestControl(t *testing.T) {
	a, b := pair(t)
	if err := unix.SetsockoptInt(b, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		t.Fatal(err)
	}
	out, in := New(2), New(2)
	oobLen := unix.CmsgSpace(unix.SizeofUcred)
	oob := make([]byte, oobLen)
	for i := range 2 {
		out.Set(i, []byte{byte(i)})
		in.Set(i, make([]byte, 16))
	}
	in.SetControl(0, oob)
	in.SetControl(1, nil) // none for this one
	for round := range 3 {
		if n, errno := out.Send(uintptr(a), 0, 2); n != 2 || errno != 0 {
			t.Fatalf("round %d: Send: %d, %v", round, n, errno)
		}
		if n, errno := in.Recv(uintptr(b), 2); n != 2 || errno != 0 {
			t.Fatalf("round %d: Recv: %d, %v", round, n, errno)
		}
		if l := in.ControlLen(0); l != oobLen {
			t.Fatalf("round %d: control length %d, want %d", round, l, oobLen)
		}
		cred, err := credentials(oob[:in.ControlLen(0)])
		if err != nil || cred.Pid != int32(os.Getpid()) {
			t.Errorf("round %d: credentials %+v, %v; want pid %d", round, cred, err, os.Getpid())
		}
		if in.ControlLen(1) != 0 || in.Flags(1)&unix.MSG_CTRUNC == 0 {
			t.Errorf("round %d: message without a control buffer: control %d, flags %#x; want 0, MSG_CTRUNC", round, in.ControlLen(1), in.Flags(1))
		}
	}
	for i := range oob {
		oob[i] = 0xff // no control message
	}
	if n, errno := in.Send(uintptr(b), 0, 2); n != 2 || errno != 0 {
		t.Errorf("Send of received messages: %d, %v", n, errno)
	}
}

// credentials parses the SCM_CREDENTIALS control message in oob.
func credentials(oob []byte) (*unix.Ucred, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("control messages %d, %v", len(msgs), err)
	}
	return unix.ParseUnixCredentials(&msgs[0])
}

// TestAllocs: Send and Recv allocate nothing, with control and name
// buffers.
func TestAllocs(t *testing.T) {
	a, b := pair(t)
	out, in := New(8), New(8)
	msg := make([]byte, 100)
	for i := range 8 {
		out.Set(i, msg)
		in.Set(i, make([]byte, 128))
		in.SetControl(i, make([]byte, 64))
		in.SetName(i, make([]byte, unix.SizeofSockaddrInet6))
	}
	round := func() {
		if n, errno := out.Send(uintptr(a), 0, 8); n != 8 || errno != 0 {
			t.Fatalf("Send: %d, %v", n, errno)
		}
		for got := 0; got < 8; {
			n, errno := in.Recv(uintptr(b), 8)
			if errno != 0 {
				t.Fatalf("Recv: %v", errno)
			}
			got += n
		}
	}
	if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
		t.Errorf("%v allocations per Send and Recv", allocs)
	}
}

// TestName: the name buffers receive each sender's address, which every
// Recv offers whole again; a message without one reports none; Send
// leaves the names out (here, one no kernel would take as a destination).
func TestName(t *testing.T) {
	loop := [4]byte{127, 0, 0, 1}
	udp := func(connectTo int) (int, int) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: loop}); err != nil {
			t.Fatal(err)
		}
		if connectTo != 0 {
			if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: loop, Port: connectTo}); err != nil {
				t.Fatal(err)
			}
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			t.Fatal(err)
		}
		return fd, sa.(*unix.SockaddrInet4).Port
	}
	rx, rxPort := udp(0)
	tx, txPort := udp(rxPort)
	out, in := New(2), New(2)
	name := make([]byte, unix.SizeofSockaddrInet6)
	for i := range 2 {
		out.Set(i, []byte{byte(i)})
		in.Set(i, make([]byte, 16))
	}
	in.SetName(0, name)
	for round := range 2 {
		clear(name)
		if n, errno := out.Send(uintptr(tx), 0, 2); n != 2 || errno != 0 {
			t.Fatalf("round %d: Send: %d, %v", round, n, errno)
		}
		if n, errno := in.Recv(uintptr(rx), 2); n != 2 || errno != 0 {
			t.Fatalf("round %d: Recv: %d, %v", round, n, errno)
		}
		l := in.NameLen(0)
		family := binary.NativeEndian.Uint16(name)
		port := binary.BigEndian.Uint16(name[2:])
		if l != unix.SizeofSockaddrInet4 || family != unix.AF_INET || int(port) != txPort || [4]byte(name[4:8]) != loop {
			t.Errorf("round %d: name %d bytes %x, want AF_INET 127.0.0.1 port %d", round, l, name[:l], txPort)
		}
		if in.NameLen(1) != 0 {
			t.Errorf("round %d: message without a name buffer: name length %d", round, in.NameLen(1))
		}
	}
	for i := range name {
		name[i] = 0xff // no address family
	}
	in.Set(0, []byte("back"))
	in.Set(1, []byte("back"))
	if n, errno := in.Send(uintptr(tx), 0, 2); n != 2 || errno != 0 {
		t.Errorf("Send of received messages: %d, %v", n, errno)
	}
}
