// Package plottest checks that the charts of package plot render: it has
// a real SVG renderer (librsvg's rsvg-convert) draw them and decodes the
// PNG it draws. For tests only.
package plottest

import (
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RequireRenderer skips t unless rsvg-convert is installed, or fails it
// when FERRY_REQUIRE_TOOLS=1.
func RequireRenderer(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("rsvg-convert"); err != nil {
		if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
			t.Fatal("rsvg-convert is not installed (librsvg2-bin) and FERRY_REQUIRE_TOOLS=1")
		}
		t.Skip("rsvg-convert not installed")
	}
}

// Render converts svg to PNG with rsvg-convert and returns the decoded
// image's bounds.
func Render(t testing.TB, svg []byte) image.Rectangle {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.svg"), filepath.Join(dir, "out.png")
	if err := os.WriteFile(in, svg, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if msg, err := exec.CommandContext(ctx, "rsvg-convert", "-o", out, in).CombinedOutput(); err != nil {
		t.Fatalf("rsvg-convert: %v\n%s", err, msg)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("rendered PNG does not decode: %v", err)
	}
	return img.Bounds()
}
