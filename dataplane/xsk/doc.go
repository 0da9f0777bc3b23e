// Package xsk is gsoplane's AF_XDP port. Open binds one AF_XDP socket to
// every RX queue of a NIC, each with its own UMEM and rings, and attaches
// an XDP program that redirects to them only IP packets for configured
// prefixes; ARP, ND and everything else, traffic for the host included,
// go on to the kernel. An XDP program someone else attached is an error,
// never replaced. A Socket's TX side is a frame.Sink through NewSink
// (which fills in Ethernet headers from the kernel's routes and
// neighbours) and its RX side a frame.Receiver.
//
// # Multi-buffer receive
//
// A packet longer than one UMEM frame (FrameSize less the kernel's 256
// bytes of headroom) is received as a chain of frames where the kernel
// can (Config.MultiBuffer, on by default; Port.MultiBuffer says): the
// XDP program is loaded with BPF_F_XDP_HAS_FRAGS (Linux 5.18) and the
// sockets are bound with XDP_USE_SG (Linux 6.6). In copy mode the kernel
// cuts a packet into descriptors of FrameSize-256 bytes, all but the
// last marked XDP_PKT_CONTD, and puts a chain on the RX ring whole or
// drops it (in zero-copy mode a descriptor is a driver's buffer). The Receiver copies a chain, once, into one buffer of the
// socket (a packet in one frame is still handed over in place), and its
// frames go back to the fill ring at once. A chain is at most
// Config.MaxChain frames (by default enough for any IP packet: 18 of
// 4096 bytes); the program passes longer frames to the kernel (counted
// as Oversize), and a longer or broken chain that reaches a socket all
// the same is dropped and counted (Stats.RXChainTooLong,
// RXChainBroken). Stats.RXMultiBuffer counts the chains received.
//
// Where the kernel refuses the program flag or the bind flag, the
// default (MultiBufferAuto) goes on without multi-buffer, as before it
// existed: the program passes frames longer than one UMEM frame to the
// kernel (Oversize); MultiBufferOn makes Open fail with
// ErrNoMultiBuffer instead. Either way the program needs Linux 5.18: it
// asks the kernel for the length of a frame (bpf_xdp_get_buff_len),
// without multi-buffer that of one longer than a 1500-byte MTU's.
//
// What a veth does (Linux 6.18, drivers/net/veth.c): a native XDP
// program on one end takes TSO and USO away from the other end, frags
// or not, so the peer's GSO packets are segmented before they cross;
// frags only raise the MTU the peer may have (without them, above about
// 3.5 KB the veth refuses the program, ERANGE, and ModeAuto falls back
// to generic mode). In generic mode the veth is not told of the program
// and the peer keeps its GSO: a GSO super-packet reaches the program
// whole, as a multi-buffer frame with frags (64 KiB: a chain of 17 or 18
// frames, its checksum the peer's partial one, as a veth hands
// CHECKSUM_PARTIAL over in memory), or linearised without (then too long
// for a socket: Oversize).
//
// # Busy polling
//
// Config.BusyPoll (off by default) turns on preferred busy polling
// (Linux 5.11): every socket gets SO_BUSY_POLL, SO_PREFER_BUSY_POLL and
// SO_BUSY_POLL_BUDGET, so that each sendto and recvfrom on it runs one
// NAPI poll of the queue in the calling thread (net/xdp/xsk.c:
// sk_busy_loop with nonblock, one round per call; the sockets only take
// MSG_DONTWAIT), and a wait for received frames or for TX completions
// keeps making such calls, checking the rings in between, for up to
// BusyPoll before it sleeps in the netpoller. The netpoller itself never
// busy polls (epoll does only with the net.core.busy_poll sysctl).
//
// What it needs from the NIC. The kernel busy polls the NAPI context the
// socket's packets came from (SO_INCOMING_NAPI_ID, Socket.NAPIID), known
// from the first packet received: only a driver's native XDP path has
// one; in generic mode there is none and the calls poll nothing. A veth
// has NAPI only with a native XDP program attached (or GRO on), and on
// Linux 6.18 even then its XDP path gives AF_XDP sockets no NAPI ID
// (observed: SO_INCOMING_NAPI_ID stays 0, GRO on or off, while a UDP
// socket fed through the same veth's NAPI gets one), so on a veth busy
// polling only adds system calls. For the application's polls to
// replace the interrupt-driven NAPI rather than race it, set the
// interface's napi_defer_hard_irqs (e.g. 2) and gro_flush_timeout (in
// ns, e.g. 200000: longer than the gap between two polls) in
// /sys/class/net/IF/ (per NAPI through netdev netlink since Linux 6.13):
// after a busy poll the kernel then arms that timer instead of
// rescheduling the NAPI or re-enabling its interrupt, and the timer
// takes over when the application stops polling. Both default to 0
// (veth too), which leaves busy polling opportunistic: the softirq goes
// on as before. An idle port answers within about gro_flush_timeout.
// With prefer busy poll and zero-copy, the kernel skips the driver
// wake-ups (xsk_no_wakeup): the application's calls drive TX too; in
// copy mode a sendto still transmits.
//
// The kernel may refuse the options: ENOPROTOOPT from a kernel built
// without CONFIG_NET_RX_BUSY_POLL (or older than 5.11),
// EPERM without CAP_NET_ADMIN (SO_PREFER_BUSY_POLL, and raising the
// budget). Open then fails with ErrNoBusyPoll: busy polling is asked for
// to be measured, and silently running without it would mislead.
// (Linux 6.18 has no getsockopt for SO_BUSY_POLL_BUDGET.)
//
// The sockets and rings are our own; from asavie/xdp only the XSKMAP
// registration is used (see prog_linux.go for why). Ring indices go
// through sync/atomic, and everything that needs package unsafe lives in
// xsk_unsafe_linux.go.
//
// It needs Linux, CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW, and works in
// the network namespace of the calling thread. On other systems Open
// returns an error. It imports frame, segment and internal packages;
// the gateway (package dataplane) and embedders import it.
package xsk
