// Package mmsg moves a batch of messages across a socket with one system
// call, sendmmsg(2) or recvmmsg(2), on message headers built once and
// reused: one buffer (iovec) per message, an optional control buffer per
// message for what recvmmsg reports beside the data (cmsg(3)), an
// optional name buffer per message for the sender's address recvmmsg
// reports, and no destination addresses (Send's socket is connected, or
// bound to its device). Unlike x/net's ReadBatch and WriteBatch it allocates
// nothing per call. It never blocks: it calls with MSG_DONTWAIT on the
// file descriptor a syscall.RawConn hands to Read, Write or Control, and
// returns the count and the errno, so that the caller decides whether to
// wait through the runtime poller.
//
// The AF_PACKET port sends and receives its frames with it, the UDP
// receive side its datagrams. It needs Linux; on other systems the
// package is empty.
package mmsg
