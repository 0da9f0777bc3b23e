// Package netlab builds the throw-away network namespaces that gsoplane's
// privileged tests and the bench run in: namespaces with lo up, veth
// pairs, addresses, routes, sysctls and device features (set from Go,
// with no ip or ethtool binary), code and child processes run inside a
// namespace, and the reference topology of docs/design.md. Every namespace is
// named Prefix, a tag, the process ID and a sequence number, so parallel
// and repeated runs never collide, and namespaces left by a process that
// died are swept before new ones are made.
//
// Its lowest layer runs code on a thread inside a namespace (NS.Run,
// NewNamed) and reads and writes sysfs as seen from inside one
// (NS.WriteSysfs, in a private mount namespace, as `ip netns exec` does).
//
// Tests use NewT and NewTopologyT, which skip unless root and remove
// everything in t.Cleanup, Main, which fails a package whose tests leave
// a namespace or a file descriptor behind, TCPTransfer and Echo for
// checked traffic between two namespaces, and NS.Counters for what a
// namespace's stack counted (segments out of order, UDP drops). The bench uses New and
// NewTopology and closes them itself.
//
// It needs Linux and CAP_NET_ADMIN (and CAP_SYS_ADMIN to create named
// namespaces). Only gsoplane's tests and bench import it.
package netlab
