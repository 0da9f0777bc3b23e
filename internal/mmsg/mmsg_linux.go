package mmsg

import "golang.org/x/sys/unix"

// Batch is the message headers of a batch, one buffer each. A Batch is
// not safe for concurrent use.
type Batch struct {
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
	ctl  []int // each message's control buffer size, 0 for none
	name []int // each message's name buffer size, 0 for none
	oob  bool  // some message has a control buffer
	addr bool  // some message has a name buffer
}

// New returns a batch of n messages (n ≥ 1) without buffers: point each
// message that is used at its buffer with Set before Send or Recv.
func New(n int) *Batch {
	b := &Batch{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n), ctl: make([]int, n), name: make([]int, n)}
	for i := range b.hdrs {
		b.hdrs[i].Hdr.Iov = &b.iovs[i]
		b.hdrs[i].Hdr.SetIovlen(1)
	}
	return b
}

// Len returns the number of messages.
func (b *Batch) Len() int { return len(b.hdrs) }

// Set points message i at buf, which must not be empty: the data Send
// sends, or the room Recv receives into. It stays there until the next
// Set or Clear.
func (b *Batch) Set(i int, buf []byte) {
	b.iovs[i].Base = &buf[0]
	b.iovs[i].SetLen(len(buf))
}

// SetControl gives message i a control buffer for Recv to fill with the
// message's control messages (nil or empty: none). Send leaves it out.
func (b *Batch) SetControl(i int, oob []byte) {
	h := &b.hdrs[i].Hdr
	h.Control, b.ctl[i] = nil, len(oob)
	if len(oob) > 0 {
		h.Control, b.oob = &oob[0], true
	}
	h.SetControllen(0)
}

// SetName gives message i a name buffer for Recv to write the sender's
// address into, a raw struct sockaddr (nil or empty: none): room for a
// sockaddr_in6 takes both IPv4 and IPv6 senders. Send leaves it out.
func (b *Batch) SetName(i int, name []byte) {
	h := &b.hdrs[i].Hdr
	h.Name, h.Namelen, b.name[i] = nil, 0, len(name)
	if len(name) > 0 {
		h.Name, b.addr = &name[0], true
	}
}

// Clear drops the references to the buffers of messages [0, n), so that
// the batch does not keep them alive; control buffers stay.
func (b *Batch) Clear(n int) {
	for i := range n {
		b.iovs[i] = unix.Iovec{}
	}
}

// Send sends messages [from, to) without blocking (MSG_DONTWAIT) and
// returns how many the kernel took, the first ones, or 0 and the errno
// when it took none (EAGAIN: the send buffer is full). Message i's
// MsgLen is then the bytes the kernel took of it.
func (b *Batch) Send(fd uintptr, from, to int) (int, unix.Errno) {
	if from >= to {
		return 0, 0
	}
	if b.oob || b.addr { // what Recv left there is not to be sent
		for i := from; i < to; i++ {
			b.hdrs[i].Hdr.SetControllen(0)
			b.hdrs[i].Hdr.Namelen = 0 // no destination: the kernel ignores the name
		}
	}
	return mmsg(unix.SYS_SENDMMSG, fd, b.hdrs[from:to])
}

// Recv receives up to n messages (at most Len) into messages [0, n)
// without blocking (MSG_DONTWAIT) and returns how many came, or 0 and
// the errno when none did (EAGAIN: nothing is waiting). Message i's
// length is then MsgLen(i), its flags Flags(i) (MSG_TRUNC: the buffer was
// too small and the rest is lost) and its control messages the first
// ControlLen(i) bytes of its control buffer, its sender's address the
// first NameLen(i) bytes of its name buffer.
func (b *Batch) Recv(fd uintptr, n int) (int, unix.Errno) {
	n = min(n, len(b.hdrs))
	if n <= 0 {
		return 0, 0
	}
	for i := range n {
		h := &b.hdrs[i].Hdr
		h.Flags = 0
		h.SetControllen(b.ctl[i])
		h.Namelen = uint32(b.name[i])
	}
	return mmsg(unix.SYS_RECVMMSG, fd, b.hdrs[:n])
}

// MsgLen returns the length of message i after Recv (the bytes received)
// or Send (the bytes sent).
func (b *Batch) MsgLen(i int) int { return int(b.hdrs[i].Len) }

// Flags returns message i's flags after Recv (MSG_TRUNC, MSG_CTRUNC).
func (b *Batch) Flags(i int) int { return int(b.hdrs[i].Hdr.Flags) }

// ControlLen returns the length of message i's control messages after
// Recv.
func (b *Batch) ControlLen(i int) int { return int(b.hdrs[i].Hdr.Controllen) }

// NameLen returns the length of the address Recv wrote into message i's
// name buffer (SetName), or 0 without one. It may exceed the buffer's
// length for an address longer than the buffer, which was cut short.
func (b *Batch) NameLen(i int) int { return int(b.hdrs[i].Hdr.Namelen) }

// BufLen returns the length of message i's buffer (Set).
func (b *Batch) BufLen(i int) int { return int(b.iovs[i].Len) }
