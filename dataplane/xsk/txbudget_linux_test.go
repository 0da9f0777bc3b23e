package xsk

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestTxBudgetFallback: where the kernel refuses XDP_MAX_TX_SKB_BUDGET
// (before Linux 6.17; here, a socket that is not AF_XDP), and for a
// budget at most the default, the budget in force is the kernel's fixed
// 32.
func TestTxBudgetFallback(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for _, n := range []int{16, 32, 256} {
		if got := setTxBudget(fd, n); got != 32 {
			t.Errorf("setTxBudget(not AF_XDP, %d) = %d, want 32", n, got)
		}
	}
}
