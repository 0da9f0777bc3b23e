// Command kinit is the init of the test-kernels guests: /init in the
// initramfs that internal/testing/kernels/cmd/test-kernels packs.
//
// It mounts what the tests need (proc, sysfs, devtmpfs, the BPF file
// system, cgroup2, tmpfs on /tmp and /run), loads the kernel modules the
// plan names and those of the devices on the buses, answers the kernel's
// module requests (as /sbin/modprobe), brings up lo, optionally checks the
// guest's NICs (the smoke check), runs each test binary of the plan with
// -test.v and a deadline, prints one result line per binary on the
// console and powers the guest off.
//
// The guest has no Go toolchain: the cmd/udpfwd tests build udpfwd and
// their own test binary with `go build -o OUT .` and `go test -c -o OUT .`;
// as /bin/go, kinit answers these two commands by copying the binaries the
// host built for that package (Plan.Prebuilt).
package main
