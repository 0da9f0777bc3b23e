package wgtunnel

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gsoplane/gsoplane/internal/testing/docrecipe"
)

// TestReadmeExcerpt: the WireGuard excerpts of the README ("Embed a VPN
// tunnel") and of docs/embedding.md ("WireGuard on the tunnel") are
// device.go's code, in its order.
func TestReadmeExcerpt(t *testing.T) {
	src, err := os.ReadFile("device.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := docrecipe.Block("../../../README.md", "### Embed a VPN tunnel", "go")
	if err != nil {
		t.Fatal(err)
	}
	if err := docrecipe.Excerpt(readme, string(src)); err != nil {
		t.Errorf("the README's WireGuard excerpt is not wgtunnel's code: %v", err)
	}
	doc, err := os.ReadFile("../../../docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## WireGuard on the tunnel\n")
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 2 {
		t.Fatalf("docs/embedding.md's WireGuard section has %d go blocks, want 2", len(blocks))
	}
	if err := docrecipe.Excerpt(blocks[0][1]+blocks[1][1], string(src)); err != nil {
		t.Errorf("docs/embedding.md's WireGuard excerpts are not wgtunnel's code: %v", err)
	}
}
