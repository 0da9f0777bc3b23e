// Package ethtool reads and switches the features (offloads) of a Linux
// network device, as `ethtool -k` and `ethtool -K` do, and reads its
// channel counts, without the ethtool binary: it speaks the legacy
// SIOCETHTOOL ioctl on a throw-away AF_INET datagram socket.
//
// It needs Linux; elsewhere every function fails. Reading works for any
// user; changing features needs CAP_NET_ADMIN in the device's network
// namespace. A call finds the device by name in the network namespace of
// the calling thread: to reach a device in another namespace, call it
// on a thread inside that namespace (internal/testing/netlab's NS.Run).
//
// Features are named as the kernel names them (netdev_features_strings in
// net/ethtool/common.c), for example tx-checksum-ip-generic, rx-gro,
// rx-gro-list, rx-udp-gro-forwarding and tx-tcp-segmentation. SetFeatures
// also takes the aliases of `ethtool -K`, each standing for these kernel
// features:
//
//	rx      rx-checksumming               rx-checksum
//	tx      tx-checksumming               tx-checksum-ipv4, tx-checksum-ip-generic,
//	                                      tx-checksum-ipv6, tx-checksum-fcoe-crc,
//	                                      tx-checksum-sctp
//	sg      scatter-gather                tx-scatter-gather, tx-scatter-gather-fraglist
//	tso     tcp-segmentation-offload      tx-tcp-segmentation, tx-tcp-ecn-segmentation,
//	                                      tx-tcp-mangleid-segmentation,
//	                                      tx-tcp6-segmentation, tx-tcp-accecn-segmentation
//	gso     generic-segmentation-offload  tx-generic-segmentation
//	gro     generic-receive-offload       rx-gro
//	lro     large-receive-offload         rx-lro
//	rxvlan  rx-vlan-offload               rx-vlan-hw-parse
//	txvlan  tx-vlan-offload               tx-vlan-hw-insert
//	ntuple  ntuple-filters                rx-ntuple-filter
//	rxhash  receive-hashing               rx-hashing
//
// The long names in the middle column are how `ethtool -k` shows these
// features; Features keys them by their kernel names only. An alias
// covers the members the device knows (older kernels have no
// tx-tcp-accecn-segmentation, say). Switched off, every member must end
// up off, so a member fixed on is an error. Switched on, members fixed
// off are skipped as long as another member is or can be on: a veth has
// tx-checksum-ip-generic but no tx-checksum-ipv4, and "tx" on turns on
// the former.
package ethtool
