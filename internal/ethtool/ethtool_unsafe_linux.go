package ethtool

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The SIOCETHTOOL requests and replies below follow the layouts in
// <linux/ethtool.h>. The variable-length ones live in []uint32 buffers:
// every field is a 32-bit word (or two), so a word slice keeps them
// aligned and lets the kernel write past the fixed header.

// ifreqData is struct ifreq with its union used as ifr_data, the pointer
// to the ethtool command. The padding makes it at least as large as the
// kernel's struct ifreq, which the kernel copies in whole.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(unsafe.Pointer(nil))]byte
}

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	cmd                                         uint32
	maxRX, maxTX, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// getBlock is struct ethtool_get_features_block: the state of 32 features.
type getBlock struct {
	available, requested, active, neverChanged uint32
}

// setBlock is struct ethtool_set_features_block: a change of 32 features.
type setBlock struct {
	valid, requested uint32
}

// Word counts of the fixed headers and of one feature block.
const (
	ssetInfoWords  = 5 // cmd, reserved, sset_mask (u64), data[0]
	gstringsWords  = 3 // cmd, string_set, len
	gfeaturesWords = 2 // cmd, size
	getBlockWords  = 4 // available, requested, active, never_changed
	setBlockWords  = 2 // valid, requested
	stringWords    = gstringLen / 4
)

// ioctl issues SIOCETHTOOL for the socket's device with the command at
// data and returns the bare errno.
func (s *socket) ioctl(data unsafe.Pointer) error {
	var ifr ifreqData
	copy(ifr.name[:], s.ifname)
	ifr.data = data
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if errno != 0 {
		return errno
	}
	return nil
}

// ioctlWords issues SIOCETHTOOL with the command held in buf.
func (s *socket) ioctlWords(buf []uint32) error {
	return s.ioctl(unsafe.Pointer(&buf[0]))
}

// stringSetLen returns the number of strings in string set set
// (ETHTOOL_GSSET_INFO).
func (s *socket) stringSetLen(set uint32) (int, error) {
	buf := make([]uint32, ssetInfoWords)
	buf[0] = unix.ETHTOOL_GSSET_INFO
	*(*uint64)(unsafe.Pointer(&buf[2])) = 1 << set
	if err := s.ioctlWords(buf); err != nil {
		return 0, err
	}
	if *(*uint64)(unsafe.Pointer(&buf[2])) == 0 {
		return 0, unix.EOPNOTSUPP
	}
	return int(buf[4]), nil
}

// stringSet returns the n strings of string set set (ETHTOOL_GSTRINGS).
func (s *socket) stringSet(set uint32, n int) ([]string, error) {
	buf := make([]uint32, gstringsWords+n*stringWords)
	buf[0], buf[1], buf[2] = unix.ETHTOOL_GSTRINGS, set, uint32(n)
	if err := s.ioctlWords(buf); err != nil {
		return nil, err
	}
	data := unsafe.Slice((*byte)(unsafe.Pointer(&buf[gstringsWords])), n*gstringLen)
	return splitStrings(data, n), nil
}

// getFeatures returns the feature blocks of the device (ETHTOOL_GFEATURES),
// asking for words blocks, and the number of blocks the kernel has, which
// ETHTOOL_SFEATURES wants exactly.
func (s *socket) getFeatures(words int) (blocks []getBlock, kernelWords int, err error) {
	buf := make([]uint32, gfeaturesWords+words*getBlockWords)
	buf[0], buf[1] = unix.ETHTOOL_GFEATURES, uint32(words)
	if err := s.ioctlWords(buf); err != nil {
		return nil, 0, err
	}
	blocks = make([]getBlock, words)
	for i := range blocks {
		w := buf[gfeaturesWords+i*getBlockWords:]
		blocks[i] = getBlock{available: w[0], requested: w[1], active: w[2], neverChanged: w[3]}
	}
	return blocks, int(buf[1]), nil
}

// setFeatures sends one ETHTOOL_SFEATURES request with the given blocks.
func (s *socket) setFeatures(blocks []setBlock) error {
	buf := make([]uint32, gfeaturesWords+len(blocks)*setBlockWords)
	buf[0], buf[1] = unix.ETHTOOL_SFEATURES, uint32(len(blocks))
	for i, b := range blocks {
		buf[gfeaturesWords+i*setBlockWords] = b.valid
		buf[gfeaturesWords+i*setBlockWords+1] = b.requested
	}
	return s.ioctlWords(buf)
}

// channels returns the device's channel counts (ETHTOOL_GCHANNELS).
func (s *socket) channels() (ethtoolChannels, error) {
	ch := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	err := s.ioctl(unsafe.Pointer(&ch))
	return ch, err
}
