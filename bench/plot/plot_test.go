package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/bench/plot/plottest"
)

func sample() *Chart {
	return &Chart{
		Title: "throughput <by size>", XLabel: "message size (bytes)", YLabel: "MB/s", LogX: true,
		Series: []Series{
			{Name: "raw tcp", X: []float64{64, 4096, 65536, 1 << 20}, Y: []float64{2, 110, 900, 3100}, Dashed: true},
			{Name: "ferry tcp", X: []float64{64, 4096, 65536, 1 << 20}, Y: []float64{1, 60, 700, 2900}},
		},
	}
}

// wellFormed parses an SVG document to its end and returns its elements
// by name.
func wellFormed(t *testing.T, b []byte) map[string]int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	seen := map[string]int{}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b)
		}
		if se, ok := tok.(xml.StartElement); ok {
			seen[se.Name.Local]++
		}
	}
	return seen
}

func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	if err := sample().WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	seen := wellFormed(t, b.Bytes())
	if seen["svg"] != 1 || seen["polyline"] != 2 || seen["circle"] != 8 {
		t.Errorf("elements %v: want one svg, a polyline per series and a marker per point", seen)
	}
	for _, s := range []string{"raw tcp", "ferry tcp", "1M", "throughput &lt;by size&gt;", "stroke-dasharray"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("SVG lacks %q", s)
		}
	}
}

func TestWriteSVGNoData(t *testing.T) {
	c := &Chart{LogY: true, Series: []Series{{Name: "zero", X: []float64{1, 2}, Y: []float64{0, -1}}}}
	if err := c.WriteSVG(io.Discard); !errors.Is(err, ErrNoData) {
		t.Errorf("only non-positive values on a log axis: %v, want ErrNoData", err)
	}
	if err := (&Chart{}).WriteSVG(io.Discard); !errors.Is(err, ErrNoData) {
		t.Errorf("no series: %v, want ErrNoData", err)
	}
}

func TestCDF(t *testing.T) {
	s := CDF("lat", []float64{3, 1, 2, 4})
	if len(s.X) != 4 || s.X[0] != 1 || s.X[3] != 4 || s.Y[0] != 0.25 || s.Y[3] != 1 {
		t.Errorf("CDF %+v", s)
	}
	big := make([]float64, 10000)
	for i := range big {
		big[i] = float64(len(big) - i)
	}
	s = CDF("big", big)
	if len(s.X) > 600 || s.X[0] != 1 || s.X[len(s.X)-1] != 10000 || s.Y[len(s.Y)-1] != 1 {
		t.Errorf("thinned CDF: %d points, ends %v %v", len(s.X), s.X[0], s.X[len(s.X)-1])
	}
}

// TestSVGRenders has a real SVG renderer (librsvg's rsvg-convert) draw
// the chart, and decodes what it drew as a PNG image. It skips without
// rsvg-convert unless FERRY_REQUIRE_TOOLS=1.
func TestSVGRenders(t *testing.T) {
	plottest.RequireRenderer(t)
	var b bytes.Buffer
	if err := sample().WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	img := plottest.Render(t, b.Bytes())
	if img.Dx() != 720 || img.Dy() != 440 {
		t.Errorf("rendered %v, want 720×440", img)
	}
}
