module github.com/gsoplane/gsoplane

go 1.26.0

require (
	github.com/tailscale/wireguard-go v0.0.0-20260821191448-23d18d66172c
	golang.org/x/sys v0.50.0
	gvisor.dev/gvisor v0.0.0-20250503011706-39ed1f5ac29c
)

require (
	github.com/asavie/xdp v0.3.4-0.20240826152323-67e5ba17320c // indirect
	github.com/cilium/ebpf v0.22.0 // indirect
	github.com/google/btree v1.1.2 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/time v0.7.0 // indirect
	golang.zx2c4.com/wintun v0.0.0-20230126152724-0fa3db229ce2 // indirect
	golang.zx2c4.com/wireguard v0.0.0-20260522210424-ecfc5a8d5446 // indirect
)
