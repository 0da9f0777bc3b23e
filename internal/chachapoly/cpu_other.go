//go:build !amd64

package chachapoly

// useAVX512 is false off amd64: New returns x/crypto's AEAD.
const useAVX512 = false
