package kernels

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeModule is a minimal ELF64 relocatable file with a .modinfo section
// holding the NUL-separated strings info, as a kernel module has.
func fakeModule(info ...string) []byte {
	modinfo := []byte(strings.Join(info, "\x00") + "\x00")
	shstrtab := []byte("\x00.modinfo\x00.shstrtab\x00")
	const ehsize, shentsize = 64, 64
	modinfoOff := uint64(ehsize)
	shstrOff := modinfoOff + uint64(len(modinfo))
	shoff := shstrOff + uint64(len(shstrtab))

	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0})        // 64-bit, little-endian, version 1
	b.Write(make([]byte, 8))                                // padding
	binary.Write(&b, le, uint16(1))                         // ET_REL
	binary.Write(&b, le, uint16(62))                        // EM_X86_64
	binary.Write(&b, le, uint32(1))                         // EV_CURRENT
	binary.Write(&b, le, uint64(0))                         // entry
	binary.Write(&b, le, uint64(0))                         // phoff
	binary.Write(&b, le, shoff)                             // shoff
	binary.Write(&b, le, uint32(0))                         // flags
	binary.Write(&b, le, []uint16{ehsize, 0, 0, shentsize}) // ehsize, phentsize, phnum, shentsize
	binary.Write(&b, le, []uint16{3, 2})                    // shnum, shstrndx
	b.Write(modinfo)
	b.Write(shstrtab)
	section := func(name, typ uint32, off, size uint64) {
		binary.Write(&b, le, []uint32{name, typ})
		binary.Write(&b, le, []uint64{0, 0, off, size}) // flags, addr, offset, size
		binary.Write(&b, le, []uint32{0, 0})            // link, info
		binary.Write(&b, le, []uint64{1, 0})            // addralign, entsize
	}
	section(0, 0, 0, 0)                             // SHN_UNDEF
	section(1, 1, modinfoOff, uint64(len(modinfo))) // .modinfo, SHT_PROGBITS
	section(10, 3, shstrOff, uint64(len(shstrtab))) // .shstrtab, SHT_STRTAB
	return b.Bytes()
}

func TestScanModules(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kernel/net/core/failover.ko", fakeModule("license=GPL", "depends=", "name=failover"))
	write("kernel/drivers/net/net_failover.ko", fakeModule("depends=failover", "name=net_failover"))
	write("kernel/drivers/net/virtio_net.ko", fakeModule("alias=virtio:d00000001v*", "depends=net_failover,failover", "name=virtio_net"))
	write("modules.builtin", []byte("kernel/net/packet/af_packet.ko\n"))

	m, err := ReadModules(dir) // no modules.dep: scans the modules
	if err != nil {
		t.Fatal(err)
	}
	order := checkVirtioNet(t, m, "virtio_net")
	if !m.Builtin("af_packet") {
		t.Error("af_packet is not built in")
	}
	var dep, alias bytes.Buffer
	if err := m.WriteIndex(&dep, &alias, order); err != nil {
		t.Fatal(err)
	}
	if alias.String() != "alias virtio:d00000001v* virtio_net\n" {
		t.Errorf("modules.alias: %q", alias.String())
	}
	if !strings.Contains(dep.String(), "kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko\n") {
		t.Errorf("modules.dep:\n%s", dep.String())
	}
}
