package main

import (
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUnprivilegedDeployment runs udpfwd as docs/udpfwd.md (PRIVILEGES)
// documents its non-root deployment: a binary with the file capabilities
// cap_net_admin,cap_net_raw,cap_bpf,cap_ipc_lock+ep, started by an
// unprivileged user (nobody), on each NIC port, and on AF_PACKET with its
// ingress filter on a clsact qdisc too: it starts, forwards a
// SHA-256-checked TCP stream both ways, and stops cleanly, leaving
// nothing on the NIC.
func TestUnprivilegedDeployment(t *testing.T) {
	requireRoot(t)
	bin := capBinary(t, udpfwdBinary(t))
	for _, c := range []struct{ name, port, filter string }{{"xdp", "xdp", "auto"}, {"packet", "packet", "auto"}, {"packet-clsact", "packet", "clsact"}} {
		t.Run(c.name, func(t *testing.T) {
			a, b := newLab(t)
			p := startCmd(t, a, nobodyCmd(t, bin, append([]string{"-port", c.port, "-packet-filter", c.filter, "-drain-timeout", "2s"}, labArgs...)...), labEnv)
			waitReady(t, p, a)
			tcpStream(t, a, b, net.JoinHostPort(srv4, "5201"), 16<<20)
			tcpStream(t, a, b, net.JoinHostPort(srv6, "5202"), 4<<20)
			p.cmd.Process.Signal(syscall.SIGTERM)
			if code := p.wait(5 * time.Second); code != 0 {
				t.Fatalf("after SIGTERM: exit %d:\n%s", code, p.out.String())
			}
			if left := leftovers(t, a); left != "" {
				t.Errorf("left behind: %s", left)
			}
		})
	}
}

// tunForEveryone makes /dev/net/tun mode 0666 for the test, as udev does
// on Debian and as the non-root deployment needs (docs/udpfwd.md,
// PRIVILEGES); a machine without udev has devtmpfs's 0600.
func tunForEveryone(t *testing.T) {
	t.Helper()
	const dev = "/dev/net/tun"
	st, err := os.Stat(dev)
	if err != nil {
		t.Skipf("no %s: %v", dev, err)
	}
	if mode := st.Mode().Perm(); mode&0o666 != 0o666 {
		t.Logf("%s is mode %#o here (no udev): 0666 for the test", dev, mode)
		if err := os.Chmod(dev, 0o666); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dev, mode) })
	}
}

// nobodyCmd returns the command that runs bin with args as the user
// nobody, who may open /dev/net/tun for the test's run (tunForEveryone);
// without that user the test is skipped.
func nobodyCmd(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	tunForEveryone(t)
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return cmd
}

// capBinary copies bin into a directory every user may enter and gives
// the copy the documented file capabilities.
func capBinary(t *testing.T, bin string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "udpfwd-caps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data, err := os.ReadFile(bin)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	out := filepath.Join(dir, "udpfwd")
	if err == nil {
		err = os.WriteFile(out, data, 0o755)
	}
	if err == nil {
		err = unix.Setxattr(out, "security.capability", fileCaps(unix.CAP_NET_ADMIN, unix.CAP_NET_RAW, unix.CAP_BPF, unix.CAP_IPC_LOCK), 0)
	}
	if err != nil {
		t.Fatalf("binary with file capabilities: %v", err)
	}
	return out
}

// fileCaps is the security.capability attribute (struct vfs_cap_data,
// revision 2) that setcap CAPS+ep writes: permitted and effective.
func fileCaps(caps ...int) []byte {
	const revision2, effective = 0x02000000, 0x1
	var permitted [2]uint32
	for _, c := range caps {
		permitted[c/32] |= 1 << (c % 32)
	}
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], revision2|effective)
	binary.LittleEndian.PutUint32(b[4:], permitted[0])
	binary.LittleEndian.PutUint32(b[12:], permitted[1])
	return b
}
