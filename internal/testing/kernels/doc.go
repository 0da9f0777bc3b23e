// Package kernels runs the project's privileged tests on the Linux kernels
// people run, each in a QEMU guest: Debian 12's own kernel (6.1) and the
// host's kernel when an image of it is at hand.
//
// The host side (cmd/test-kernels, `make test-kernels`) fetches each kernel
// as a Debian package and unpacks it without installing it, builds the test
// binaries and the bench statically, packs them with a small init of its own
// (cmd/kinit) and the kernel's modules into a gzip'd newc cpio archive
// (Archive), boots the kernel under QEMU and reads the guest's serial
// console. The guest runs every test binary with -test.v, reduces its output
// to a Result (ParseTestOutput) and prints it as one line (ResultPrefix
// followed by JSON); the host collects these lines into a Report: per kernel
// and per package the passed, failed and skipped counts, the failed tests
// with their last lines of output and the skipped ones with their reasons,
// each skip classed as a missing tool, a missing kernel feature or
// something else.
//
// Modules is what the guest needs to load modules as a stock system does:
// modules.dep for the order, modules.alias for the names the kernel asks
// for (the init answers the kernel's requests as /sbin/modprobe) and for the
// devices found on the buses.
package kernels
