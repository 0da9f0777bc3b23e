//go:build !amd64

package chachapoly

// vecPowers is empty: there is no vector Poly1305 off amd64.
type vecPowers struct{}

// blocksVec is never called: updatePadded calls it only if useAVX512,
// which is the constant false here.
func (p *poly) blocksVec([]byte) { panic("chachapoly: no vector Poly1305") }
