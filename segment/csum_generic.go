//go:build !amd64

package segment

func sum(b []byte, acc uint64) uint64 { return sumGeneric(b, acc) }

func copySum(dst, src []byte, acc uint64) uint64 { return copySumGeneric(dst, src, acc) }
