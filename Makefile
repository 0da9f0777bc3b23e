# The test command the README and CI use: sudo make test. As root it
# installs what the tests need (scripts/test-deps) and runs every test,
# the privileged ones (namespaces, TUN, AF_XDP) included; as another user
# those skip and say why.
GO ?= go

.PHONY: test deps check generate check-generated bench udpfwd wggso soak fuzz test-kernels test-kernels-short qemu
# The second run is the copy counts (internal/copycount): TestCopies of
# each package that builds a path, in the build that counts copies.
test: deps check
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -tags copycount -run '^Test(Copies|Add)$$' ./internal/copycount ./dataplane ./dataplane/tunnel

deps:
	@scripts/test-deps

# Formatting, vet, the portable build (the pipeline and the pure
# packages build everywhere, the Linux ports return "not supported"), and
# the eBPF objects against their C sources.
check: check-generated
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) vet ./...
	GOOS=windows $(GO) build ./...

# The ports' eBPF programs are C (dataplane/*/bpf/*.c, headers in
# internal/bpfprog/include), compiled by bpf2go into the committed objects
# and Go wrappers, so that building needs no C compiler. generate
# compiles them again (clang, and llvm-strip from llvm); check-generated
# fails if that changes a committed file, and without clang says it
# skipped.
BPF_PACKAGES = ./dataplane/xsk ./dataplane/afpacket
BPF_GENERATED = dataplane/xsk/xdp_bpfe[bl].* dataplane/afpacket/filter_bpfe[bl].*

generate:
	$(GO) generate $(BPF_PACKAGES)

check-generated:
	@if ! command -v clang >/dev/null 2>&1 || ! command -v llvm-strip >/dev/null 2>&1; then \
		echo "check: no clang or llvm-strip: skipped checking the eBPF objects against their C sources"; \
	else \
		$(MAKE) --no-print-directory generate && git diff --exit-code --stat -- $(BPF_GENERATED) || \
		{ echo "the eBPF objects differ from their C sources: run make generate and commit them"; exit 1; }; \
	fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./segment ./txqueue

# udpfwd and wggso drop capabilities on every thread, which needs a
# cgo-free build.
udpfwd:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o udpfwd ./cmd/udpfwd

wggso:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o wggso ./cmd/wggso

# Long runs, not in CI. The soak runs the gateway for SOAKTIME under load,
# link flaps, neighbour churn, an application that stops reading and
# clean restarts, and fails if its memory or goroutines grow, then the
# floods of TestGatewayFloods at full size; fuzz runs every fuzz target
# for FUZZTIME, one after another.
SOAKTIME ?= 10m
FUZZTIME ?= 10m
soak:
	GSOPLANE_SOAK=$(SOAKTIME) $(GO) test -count=1 -run '^(TestSoak|TestGatewayFloods)$$' -timeout 0 -v ./dataplane

# Each fuzz target as package:name; the XDP program and receive targets
# run the kernel's verifier and sockets, so they need root. One worker
# each, which leaves the other core to the kernel and the machine.
FUZZ_TARGETS = ./segment:FuzzSplit ./segment:FuzzValidate ./segment:FuzzCoalesce \
	./segment:FuzzWire ./segment:FuzzCopySum ./internal/ethernet:FuzzIsIP \
	./internal/iphdr:FuzzRead \
	./internal/chachapoly:FuzzAEAD ./internal/chachapoly:FuzzPoly ./internal/chachapoly:FuzzChaChaXOR \
	./internal/icmperr:FuzzErrorFor ./dataplane/afpacket:FuzzReceiveFrame \
	./dataplane/udp:FuzzReceiverHeaders \
	./dataplane/wireguard:FuzzInitiation ./dataplane/wireguard:FuzzResponse \
	./dataplane/wireguard:FuzzCookieReply ./dataplane/wireguard:FuzzData \
	./dataplane/wireguard/uapi:FuzzHandle \
	./dataplane/xsk:FuzzReceiveChains ./dataplane/xsk:FuzzXDPProgram
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) -parallel 1 "$${t%%:*}"; \
	done

# The kernel matrix, not in CI (without KVM the guests run under
# emulation: 13 minutes for Debian 12's kernel): the privileged tests and
# the bench in QEMU guests booting Debian 12's kernel (6.1) and the host's,
# if an image of it is found. As root on Debian it installs QEMU first; without QEMU or a kernel
# it says so and skips. KERNELS_FLAGS selects, e.g.
# KERNELS_FLAGS='-packages dataplane/xsk,dataplane/afpacket -run XDP'.
# The short form leaves out the gateway's and udpfwd's end-to-end tests
# (throughput under emulation) and runs segment with -test.short.
KERNELS_FLAGS ?=
KERNELS_SHORT = -short -packages dataplane/xsk,dataplane/afpacket,dataplane/tun,dataplane/udp,segment
test-kernels: qemu
	$(GO) run ./internal/testing/kernels/cmd/test-kernels $(KERNELS_FLAGS)
test-kernels-short: qemu
	$(GO) run ./internal/testing/kernels/cmd/test-kernels $(KERNELS_SHORT) $(KERNELS_FLAGS)
qemu:
	@command -v qemu-system-x86_64 >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1 || \
		{ echo "test-kernels: installing qemu-system-x86"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null; }
