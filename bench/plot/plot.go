// Package plot draws the line charts of ferry's benchmark reports as
// plain SVG: throughput against message size or depth, and latency
// distributions (CDFs). It has no dependencies beyond the standard
// library, so the core module and the benchmark modules (bench/peers)
// draw with the same code.
package plot

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Series is one line: points (X[i], Y[i]) in order of X.
type Series struct {
	Name string
	X, Y []float64
	// Dashed draws the line dashed (for floors and references).
	Dashed bool
	// Color is an SVG colour; empty takes the series' place in Palette.
	Color string
}

// Chart is a line chart with labelled axes, optionally logarithmic.
type Chart struct {
	Title          string
	XLabel, YLabel string
	LogX, LogY     bool
	Series         []Series
	// Width and Height are the image size in pixels; zero: 720×440.
	Width, Height int
}

// ErrNoData reports a chart with no point that can be drawn (every
// series empty, or only non-positive values on a log axis).
var ErrNoData = errors.New("plot: no data to draw")

// Palette is the colours series take in turn: a colour-blind-safe set
// (Okabe–Ito).
var Palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"}

// CDF returns the empirical cumulative distribution of samples as a
// series: X the sorted values, Y the fraction of samples at or below each
// (from 1/n to 1). Long inputs are thinned to at most 512 points, always
// keeping the extremes.
func CDF(name string, samples []float64) Series {
	v := slices.Clone(samples)
	slices.Sort(v)
	s := Series{Name: name}
	n := len(v)
	step := max(1, n/512)
	for i := 0; i < n; i += step {
		s.X = append(s.X, v[i])
		s.Y = append(s.Y, float64(i+1)/float64(n))
	}
	if n > 0 && s.X[len(s.X)-1] != v[n-1] {
		s.X = append(s.X, v[n-1])
		s.Y = append(s.Y, 1)
	}
	return s
}

// axis maps data values to pixels along one axis.
type axis struct {
	lo, hi   float64 // data range (log10 of it on a log axis)
	log      bool
	p0, p1   float64 // pixel range
	ticks    []float64
	tickText []string
}

func (a *axis) pos(v float64) float64 {
	if a.log {
		v = math.Log10(v)
	}
	if a.hi == a.lo {
		return (a.p0 + a.p1) / 2
	}
	return a.p0 + (v-a.lo)/(a.hi-a.lo)*(a.p1-a.p0)
}

// usable reports whether v can be drawn on the axis.
func (a *axis) usable(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!a.log || v > 0)
}

func newAxis(vals []float64, log bool, p0, p1 float64, fromZero bool) *axis {
	a := &axis{log: log, p0: p0, p1: p1}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if log {
			v = math.Log10(v)
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if log {
		lo, hi = math.Floor(lo), math.Ceil(hi)
		if hi == lo {
			hi++
		}
		for e := lo; e <= hi; e++ {
			a.ticks = append(a.ticks, e)
			a.tickText = append(a.tickText, format(math.Pow(10, e)))
		}
		a.lo, a.hi = lo, hi
		return a
	}
	if fromZero && lo > 0 {
		lo = 0
	}
	if hi == lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	lo = math.Floor(lo/step) * step
	hi = math.Ceil(hi/step) * step
	for t := lo; t <= hi+step/2; t += step {
		a.ticks = append(a.ticks, t)
		a.tickText = append(a.tickText, format(t))
	}
	a.lo, a.hi = lo, hi
	return a
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// format writes a tick value compactly: 1.5k, 2M, 0.25.
func format(v float64) string {
	av := math.Abs(v)
	switch {
	case av >= 1e9:
		return trim(v/1e9) + "G"
	case av >= 1e6:
		return trim(v/1e6) + "M"
	case av >= 1e3:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

func trim(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// WriteSVG draws the chart as an SVG document.
func (c *Chart) WriteSVG(w io.Writer) error {
	wd, ht := float64(c.Width), float64(c.Height)
	if wd <= 0 || ht <= 0 {
		wd, ht = 720, 440
	}
	left, right, top, bottom := 80.0, wd-190, 40.0, ht-60
	var xs, ys []float64
	probeX, probeY := &axis{log: c.LogX}, &axis{log: c.LogY}
	for _, s := range c.Series {
		for i := range min(len(s.X), len(s.Y)) {
			if probeX.usable(s.X[i]) && probeY.usable(s.Y[i]) {
				xs, ys = append(xs, s.X[i]), append(ys, s.Y[i])
			}
		}
	}
	if len(xs) == 0 {
		return ErrNoData
	}
	ax := newAxis(xs, c.LogX, left, right, false)
	ay := newAxis(ys, c.LogY, bottom, top, true)

	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", wd, ht, wd, ht)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%g" height="%g" fill="white"/>`+"\n", wd, ht)
	fmt.Fprintf(&b, `<text x="%g" y="24" font-size="15" text-anchor="middle">%s</text>`+"\n", (left+right)/2, esc(c.Title))
	// Grid and ticks.
	for i, t := range ax.ticks {
		x := ax.p0 + (t-ax.lo)/(ax.hi-ax.lo)*(ax.p1-ax.p0)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#ddd"/>`+"\n", x, top, x, bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x, bottom+16, esc(ax.tickText[i]))
	}
	for i, t := range ay.ticks {
		y := ay.p0 + (t-ay.lo)/(ay.hi-ay.lo)*(ay.p1-ay.p0)
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, right, y)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, esc(ay.tickText[i]))
	}
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`+"\n", left, top, right-left, bottom-top)
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", (left+right)/2, ht-18, esc(c.XLabel))
	fmt.Fprintf(&b, `<text x="18" y="%g" text-anchor="middle" transform="rotate(-90 18 %g)">%s</text>`+"\n", (top+bottom)/2, (top+bottom)/2, esc(c.YLabel))
	// Lines, markers and the legend.
	for si, s := range c.Series {
		col := s.Color
		if col == "" {
			col = Palette[si%len(Palette)]
		}
		var pts []string
		for i := range min(len(s.X), len(s.Y)) {
			if ax.usable(s.X[i]) && ay.usable(s.Y[i]) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", ax.pos(s.X[i]), ay.pos(s.Y[i])))
			}
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", col, dash, strings.Join(pts, " "))
		}
		if len(pts) <= 32 {
			for _, p := range pts {
				x, y, _ := strings.Cut(p, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", x, y, col)
			}
		}
		ly := top + 10 + float64(si)*18
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"%s/>`+"\n", right+12, ly, right+36, ly, col, dash)
		fmt.Fprintf(&b, `<text x="%g" y="%g">%s</text>`+"\n", right+42, ly+4, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// esc escapes text for SVG.
func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
