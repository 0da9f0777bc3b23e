# The test command the README and CI use. Run as root for the privileged
# (namespace, TUN, AF_XDP) tests; as another user they skip with a message.
GO ?= go
PURE := ./segment/... ./txqueue/...

.PHONY: test check bench udpfwd
test: check
	$(GO) test -race -count=1 $(PURE)
	$(GO) test -count=1 ./...

check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./segment ./txqueue

# udpfwd drops capabilities on every thread, which needs a cgo-free build.
udpfwd:
	CGO_ENABLED=0 $(GO) build -o udpfwd ./cmd/udpfwd
